package comm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/occl/occl/comm"
)

// TestRewireLongReasonSameOnEveryRank shows that a failed switch whose
// error is longer than a verdict message can carry still gives every rank
// the same *RewireError: rank 0, which decided, reports the reason as the
// others received it, not its own longer text.
func TestRewireLongReasonSameOnEveryRank(t *testing.T) {
	base := mustTopo(t, rewireBase)
	target := mustTopo(t, rewireBase+",circuits=0-1/2-3")
	long := "controller: " + strings.Repeat("port 3 is failed; ", 100)
	var seen errorTexts
	requireOK(t, runLocal(t, 8, func(ctx context.Context, c *comm.Communicator) error {
		_, err := c.Rewire(ctx, comm.Rewire{Target: target, Apply: func(context.Context) error {
			return fmt.Errorf("%w: %s", comm.ErrNotSwitched, long)
		}})
		var re *comm.RewireError
		if !errors.As(err, &re) || re.Step != "apply" || re.Rank != 0 {
			return fmt.Errorf("failed apply: %v", err)
		}
		seen.add(re)
		return keptTopology(c)
	}, comm.WithTopology(base)))
	seen.requireOne(t)
}
