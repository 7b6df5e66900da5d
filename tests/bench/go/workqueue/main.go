// Command workqueue measures client-go's work queue on this machine, for comparison with the Python
// WorkQueue in the same benchmark run (tests/bench/test_queue_bench.py builds and runs it).
//
// Why a program and not `go test -bench` on client-go: the module cache is read-only and the Python
// side needs the same shapes of work (N distinct keys, a trivial worker), printed as keys/s. Modes:
//
//   - clientgo-benchmarkqueue: the body of client-go's own BenchmarkQueue (util/workqueue/queue_test.go:
//     a fresh queue, then 100 x Add, Get, Done of one key at a time), run through testing.Benchmark;
//   - add-all-then-get-done: Add N distinct keys, then Get and Done each (one goroutine, no blocking);
//   - worker: one worker goroutine Get/Done while the main goroutine Adds N keys, then ShutDown and
//     wait for the worker (what a controller with a reconcile that does nothing costs);
//   - worker-ratelimited: the same on controller-runtime's classic queue (rate limiting queue with
//     client-go's default controller rate limiter), with Forget after each key.
//
// One JSON object per line on stdout: {"mode", "keys", "seconds", "keys_per_s", "gomaxprocs"}.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// request is shaped like controller-runtime's reconcile.Request (a namespace and a name).
type request struct {
	Namespace string
	Name      string
}

type result struct {
	Mode       string  `json:"mode"`
	Keys       int     `json:"keys"`
	Seconds    float64 `json:"seconds"`
	KeysPerS   float64 `json:"keys_per_s"`
	GoMaxProcs int     `json:"gomaxprocs"`
}

func keys(n int) []request {
	out := make([]request, n)
	for i := range out {
		out[i] = request{Namespace: "ns", Name: fmt.Sprintf("obj-%d", i)}
	}
	return out
}

func addAllThenGetDone(ks []request) time.Duration {
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[request]{})
	defer q.ShutDown()
	start := time.Now()
	for _, k := range ks {
		q.Add(k)
	}
	for range ks {
		k, _ := q.Get()
		q.Done(k)
	}
	return time.Since(start)
}

func worker(ks []request) time.Duration {
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[request]{})
	var wg sync.WaitGroup
	start := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			k, shutdown := q.Get()
			if shutdown {
				return
			}
			q.Done(k)
		}
	}()
	for _, k := range ks {
		q.Add(k)
	}
	q.ShutDownWithDrain()
	wg.Wait()
	return time.Since(start)
}

func workerRateLimited(ks []request) time.Duration {
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[request](),
		workqueue.TypedRateLimitingQueueConfig[request]{},
	)
	var wg sync.WaitGroup
	start := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			k, shutdown := q.Get()
			if shutdown {
				return
			}
			q.Forget(k)
			q.Done(k)
		}
	}()
	for _, k := range ks {
		q.Add(k)
	}
	q.ShutDownWithDrain()
	wg.Wait()
	return time.Since(start)
}

// benchmarkQueue is client-go's BenchmarkQueue, verbatim but for the key type.
func benchmarkQueue(b *testing.B) {
	keys := make([]string, 100)
	for idx := range keys {
		keys[idx] = fmt.Sprintf("key-%d", idx)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{})
		b.StartTimer()
		for j := 0; j < 100; j++ {
			q.Add(keys[j])
			key, _ := q.Get()
			q.Done(key)
		}
	}
}

func best(repeats int, run func() time.Duration) time.Duration {
	var min time.Duration
	for i := 0; i < repeats; i++ {
		runtime.GC()
		if d := run(); i == 0 || d < min {
			min = d
		}
	}
	return min
}

func main() {
	n := flag.Int("n", 200000, "distinct keys per run")
	repeats := flag.Int("repeats", 3, "runs per mode; the fastest is reported")
	flag.Parse()
	ks := keys(*n)
	out := json.NewEncoder(os.Stdout)
	emit := func(mode string, count int, d time.Duration) {
		s := d.Seconds()
		if err := out.Encode(result{mode, count, s, float64(count) / s, runtime.GOMAXPROCS(0)}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	bench := testing.Benchmark(benchmarkQueue)
	emit("clientgo-benchmarkqueue", bench.N*100, bench.T)
	emit("add-all-then-get-done", *n, best(*repeats, func() time.Duration { return addAllThenGetDone(ks) }))
	emit("worker", *n, best(*repeats, func() time.Duration { return worker(ks) }))
	emit("worker-ratelimited", *n, best(*repeats, func() time.Duration { return workerRateLimited(ks) }))
}
