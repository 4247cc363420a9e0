package fanout

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// TestEach: every item runs, all at once (each waits until all have
// started, which one after the other would not), and errors come back at
// their items' indices.
func TestEach(t *testing.T) {
	const n = 5
	var started sync.WaitGroup
	started.Add(n)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	bad := errors.New("odd")
	errs := Each(make([]int, n), func(i int, _ int) error {
		started.Done()
		select {
		case <-all:
		case <-time.After(10 * time.Second):
			return errors.New("the other items did not start meanwhile")
		}
		if i%2 == 1 {
			return bad
		}
		return nil
	})
	for i, err := range errs {
		if (i%2 == 1) != (err == bad) {
			t.Errorf("item %d: %v", i, err)
		}
	}
}
