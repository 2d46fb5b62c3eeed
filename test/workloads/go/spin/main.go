// go-spin: a cgo Go program under the agent. 64 goroutines spin on the CPU until the
// number of seconds given (wall time) has passed, while another allocates (the garbage
// collector's threads, its stop-the-world and SIGURG preemption run meanwhile); then it
// prints "ok cpu_seconds X", the process's CPU (user + system, getrusage).
//
// Usage: go-spin [SECONDS [LINGER]]. LINGER: seconds to stay idle after printing.
// A Go program ends with the exit_group system call, not libc's exit: no atexit
// handler or destructor runs, so the agent writes no final profile. A test that
// compares the profiles with the CPU printed lets the agent's periodic uploads cover
// the end of the work by lingering for two upload periods.
//
// import "C" makes it a cgo binary, linked against libc: the Go runtime creates its
// threads with pthread_create and sets its signal handlers with libc's sigaction
// (x_cgo_sigaction), so the agent's interposition and sampling handler apply to it.
package main

// #include <stdlib.h>
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

var sink atomic.Value

//go:noinline
func spin(deadline time.Time) (x float64) {
	for time.Now().Before(deadline) {
		for i := 0; i < 100000; i++ {
			x += float64(i) * 0.5
		}
	}
	return
}

//go:noinline
func allocate(stop <-chan struct{}) (n int) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		for i := 0; i < 256; i++ {
			b := make([]byte, 4<<10)
			b[n%len(b)] = byte(n)
			sink.Store(b)
			n++
		}
		time.Sleep(time.Millisecond)
	}
}

func main() {
	args := []float64{2, 0} // SECONDS, LINGER
	if len(os.Args) > len(args)+1 {
		fmt.Fprintln(os.Stderr, "usage: go-spin [SECONDS [LINGER]]")
		os.Exit(2)
	}
	for i, a := range os.Args[1:] {
		v, err := strconv.ParseFloat(a, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "usage: go-spin [SECONDS [LINGER]]")
			os.Exit(2)
		}
		args[i] = v
	}
	secs, linger := args[0], args[1]
	C.abs(1) // a cgo call
	// One deadline for all: 64 goroutines on GOMAXPROCS threads start over tens of ms.
	deadline := time.Now().Add(time.Duration(secs * float64(time.Second)))
	stop := make(chan struct{})
	allocs := make(chan int)
	go func() { allocs <- allocate(stop) }()
	var wg sync.WaitGroup
	var total uint64
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if spin(deadline) == -1 {
				atomic.AddUint64(&total, 1)
			}
		}()
	}
	wg.Wait()
	close(stop)
	n := <-allocs
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fmt.Fprintln(os.Stderr, "getrusage:", err)
		os.Exit(1)
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("ok cpu_seconds %.3f allocations %d gcs %d\n", cpu.Seconds(), n, ms.NumGC)
	time.Sleep(time.Duration(linger * float64(time.Second)))
}
