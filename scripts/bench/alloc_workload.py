"""The allocation profilers' Python workload (peers_alloc.py runs it with Debian's
/usr/bin/python3, whose allocations go through libc's malloc): ROUNDS rounds, each
building and dropping large lists and dicts.

usage: /usr/bin/python3 alloc_workload.py [ROUNDS [N]]   (4, 1000000)

Each round: a list of N ints grown by append (its item array reallocated as it grows),
`[None] * N`, a dict comprehension of N / 2 items (int keys, str values: the dict's
tables reallocated as it grows), and N / 10 bytes objects of 64 B to 2 KiB (those above
512 B come from malloc, the rest from Python's own small-object allocator), all dropped
at the end of the round. Prints "rounds R n N wall_s W cpu_s C": the time of the rounds
alone (without the interpreter's start-up and exit).
"""
import sys
import time


def one_round(r, n):
    a = []
    for i in range(n):
        a.append(i * 7 + r)
    b = [None] * n
    d = {i: str(i) for i in range(n // 2)}
    blobs = [bytes(64 + (i * 37 + r) % 1985) for i in range(n // 10)]
    return len(a) + len(b) + len(d) + len(blobs)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    n = int(float(sys.argv[2])) if len(sys.argv) > 2 else 1000000
    t0, c0 = time.perf_counter(), time.process_time()
    total = 0
    for r in range(rounds):
        total += one_round(r, n)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert total == rounds * (n + n + n // 2 + n // 10)
    print("rounds %d n %d wall_s %.6f cpu_s %.6f" % (rounds, n, wall, cpu))


if __name__ == "__main__":
    main()
