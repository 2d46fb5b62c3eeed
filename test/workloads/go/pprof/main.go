// go-pprof: Go's own CPU profiler (runtime/pprof) in a cgo Go program under the agent.
//
// Usage: go-pprof SECONDS FILE [LINGER]. It profiles itself into FILE while 4
// goroutines burn CPU until the process has used SECONDS of CPU (getrusage: the same
// work with or without the agent, whatever the load of the machine), stops the
// profile, reads it back and prints "ok samples S cpu_ns N burn_seconds B cpu_seconds
// X": S is the number of SIGPROF samples Go's profile holds (the sum of its
// samples/count values), N the sum of its cpu/nanoseconds values, B the process CPU
// while it profiled, X the process CPU so far. Then it stays idle for LINGER seconds
// (see go-spin: a Go program's exit writes no final profile of the agent).
//
// Go's profiler arms one timer per thread (timer_create, SIGPROF) and handles the
// signal with its own handler; the agent's sampling handler, which the kernel holds for
// SIGPROF, must hand those signals to Go's handler on Go's signal stack.
package main

// #include <stdlib.h>
import "C"

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

//go:noinline
func burn(stop *int32) (x float64) {
	for atomic.LoadInt32(stop) == 0 {
		for i := 0; i < 100000; i++ {
			x += float64(i) * 0.5
		}
	}
	return
}

// A protobuf field: its number, its wire type, and its varint value or bytes.
type field struct {
	num   uint64
	wire  uint64
	value uint64
	data  []byte
}

var errTruncated = errors.New("truncated protobuf")

func uvarint(b []byte) (uint64, int, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, 0, errTruncated
	}
	return v, n, nil
}

// fields splits one protobuf message into its fields.
func fields(b []byte) ([]field, error) {
	var out []field
	for len(b) > 0 {
		key, n, err := uvarint(b)
		if err != nil {
			return nil, err
		}
		b = b[n:]
		f := field{num: key >> 3, wire: key & 7}
		switch f.wire {
		case 0:
			if f.value, n, err = uvarint(b); err != nil {
				return nil, err
			}
			b = b[n:]
		case 1:
			if len(b) < 8 {
				return nil, errTruncated
			}
			f.value = binary.LittleEndian.Uint64(b)
			b = b[8:]
		case 2:
			l, n, err := uvarint(b)
			if err != nil {
				return nil, err
			}
			b = b[n:]
			if uint64(len(b)) < l {
				return nil, errTruncated
			}
			f.data, b = b[:l], b[l:]
		case 5:
			if len(b) < 4 {
				return nil, errTruncated
			}
			f.value = uint64(binary.LittleEndian.Uint32(b))
			b = b[4:]
		default:
			return nil, fmt.Errorf("wire type %d", f.wire)
		}
		out = append(out, f)
	}
	return out, nil
}

// sampleTotals reads a gzip'd pprof profile and sums each sample type's values
// (Profile.sample = 2, Sample.value = 2, packed or not).
func sampleTotals(path string) ([]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(z)
	if err != nil {
		return nil, err
	}
	top, err := fields(raw)
	if err != nil {
		return nil, err
	}
	var totals []int64
	add := func(i int, v uint64) {
		for len(totals) <= i {
			totals = append(totals, 0)
		}
		totals[i] += int64(v)
	}
	for _, s := range top {
		if s.num != 2 || s.wire != 2 {
			continue
		}
		sf, err := fields(s.data)
		if err != nil {
			return nil, err
		}
		i := 0
		for _, v := range sf {
			if v.num != 2 {
				continue
			}
			if v.wire == 0 {
				add(i, v.value)
				i++
				continue
			}
			for p := v.data; len(p) > 0; {
				x, n, err := uvarint(p)
				if err != nil {
					return nil, err
				}
				p = p[n:]
				add(i, x)
				i++
			}
		}
	}
	return totals, nil
}

func main() {
	if len(os.Args) != 3 && len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: go-pprof SECONDS FILE [LINGER]")
		os.Exit(2)
	}
	secs, err := strconv.ParseFloat(os.Args[1], 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad SECONDS:", err)
		os.Exit(2)
	}
	linger := 0.0
	if len(os.Args) == 4 {
		if linger, err = strconv.ParseFloat(os.Args[3], 64); err != nil {
			fmt.Fprintln(os.Stderr, "bad LINGER:", err)
			os.Exit(2)
		}
	}
	C.abs(1) // a cgo call
	out, err := os.Create(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		fmt.Fprintln(os.Stderr, "StartCPUProfile:", err)
		os.Exit(1)
	}
	start := processCPU()
	want := time.Duration(secs * float64(time.Second))
	var stop int32
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() { defer wg.Done(); burn(&stop) }()
	}
	for processCPU()-start < want {
		time.Sleep(10 * time.Millisecond)
	}
	atomic.StoreInt32(&stop, 1)
	wg.Wait()
	used := processCPU() - start
	pprof.StopCPUProfile()
	if err := out.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	totals, err := sampleTotals(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "reading the profile:", err)
		os.Exit(1)
	}
	if len(totals) < 2 {
		fmt.Fprintf(os.Stderr, "profile has %d sample types, expected 2\n", len(totals))
		os.Exit(1)
	}
	fmt.Printf("ok samples %d cpu_ns %d burn_seconds %.3f cpu_seconds %.3f\n", totals[0],
		totals[1], used.Seconds(), processCPU().Seconds())
	time.Sleep(time.Duration(linger * float64(time.Second)))
}
