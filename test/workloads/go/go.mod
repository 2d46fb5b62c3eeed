module libddprof/workloads/go

go 1.19
