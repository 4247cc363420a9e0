package reconfig_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/commtest"
	"github.com/occl/occl/reconfig"
	"github.com/occl/occl/reconfig/ocspb"
)

// TestReconfigureBadInput shows that Reconfigure and Recover refuse what
// the caller got wrong with an error, without panicking: a nil
// communicator in the list, a nil communicator to recover, and a target
// topology that does not validate (a rank on a host it does not have),
// given with a sub-communicator whose part of the target is cut from it.
// Nothing is rewired.
func TestReconfigureBadInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	world, children := splitWorld(t, ctx)

	if _, err := reconfig.Reconfigure(ctx, []*comm.Communicator{world[0], nil}, spec(t, base)); err == nil {
		t.Fatal("Reconfigure with a nil communicator: no error")
	}
	if _, err := reconfig.Reconfigure(ctx, []*comm.Communicator{nil, nil}, spec(t, base)); err == nil {
		t.Fatal("Reconfigure with nil communicators: no error")
	}
	if nc, _, err := reconfig.Recover(ctx, nil, nil); err == nil || nc != nil {
		t.Fatalf("Recover of a nil communicator: %v, %v", nc, err)
	}

	long := strings.Repeat("x", ocspb.MaxRequestIDLen)
	if _, err := reconfig.Reconfigure(ctx, world, spec(t, base), reconfig.WithRequestID(long)); err == nil || !strings.Contains(err.Error(), "rollback") {
		t.Fatalf("Reconfigure with a request id its rollback's cannot extend: %v", err)
	}

	bad := spec(t, base+",circuits=0-1/2-3")
	bad.Ranks[5].Host = 99
	commtest.OnEach(t, world, func(r int, c *comm.Communicator) error {
		_, err := reconfig.Reconfigure(ctx, []*comm.Communicator{c, children[r]}, bad)
		if err == nil {
			return errors.New("an invalid target: no error")
		}
		if c.Epoch() != 0 || children[r].Epoch() != 0 || c.Err() != nil {
			return errors.New("an invalid target changed the communicators")
		}
		return nil
	})
}
