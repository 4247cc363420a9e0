// Package fanout runs one function per item at once, as the ranks of a
// multi-rank test each run in a process of their own. It imports nothing
// of occl, so that every package's tests can use it, those inside comm
// included (internal/commtest builds its helpers on it).
package fanout

import "sync"

// Each runs fn for every item of xs at once, each on a goroutine of its
// own, and returns their errors by index.
func Each[T any](xs []T, fn func(i int, x T) error) []error {
	errs := make([]error, len(xs))
	var wg sync.WaitGroup
	for i, x := range xs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(i, x)
		}()
	}
	wg.Wait()
	return errs
}
