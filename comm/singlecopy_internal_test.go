package comm

import (
	"testing"

	"github.com/occl/occl/internal/memcopy"
)

// The shared-memory single-copy setting follows OCCL_SHM_CMA, and by
// default lends all-to-all blocks from a threshold that this machine's
// rates and whether the ranks outnumber the cores decide; a communicator
// whose transport is not shared memory measures nothing. Groups offer
// their sends unless single copies are off or every large message is sent
// by descriptor. Where the ranks outnumber the cores and blocks are lent,
// all-to-all blocks taken whole are lent from lendMinWholeShared, or from
// lendMinSharedUncached where the machine's rates say single copies do
// not pay and lending was not asked for.
func TestSingleCopySetting(t *testing.T) {
	defer func(f func() bool) { singleCopyPays = f }(singleCopyPays)
	for _, pays := range []bool{true, false} {
		measured := 0
		singleCopyPays = func() bool { measured++; return pays }
		autoFrom, sharedWhole := lendMinUncached, lendMinSharedUncached
		if pays {
			autoFrom, sharedWhole = lendMinCore, lendMinWholeShared
		}
		cases := []struct {
			env, transport string
			oversubscribed bool
			off            bool
			from           int
			send           bool
			measures       bool
			whole          int
		}{
			{"", TransportAuto, false, false, autoFrom, false, true, 0},
			{"auto", TransportSHM, false, false, autoFrom, false, true, 0},
			{"", TransportAuto, true, false, lendMinShared, false, true, sharedWhole},
			{"lend", TransportAuto, false, false, lendMinCore, false, false, 0},
			{"LEND", TransportSHM, true, false, lendMinShared, false, false, lendMinWholeShared},
			{"off", TransportAuto, false, true, 0, false, false, 0},
			{"off", TransportAuto, true, true, 0, false, false, 0},
			{"0", TransportAuto, false, true, 0, false, false, 0},
			{"64K", TransportAuto, false, false, 64 << 10, true, false, 0},
			{"64K", TransportSHM, true, false, 64 << 10, true, false, 0},
			{"", TransportTCP, false, true, 0, false, false, 0},
			{"lend", TransportRDMA, false, true, 0, false, false, 0},
		}
		for _, tc := range cases {
			t.Setenv("OCCL_SHM_CMA", tc.env)
			c, err := newConfig([]Option{WithTransport(tc.transport)})
			if err != nil {
				t.Fatalf("OCCL_SHM_CMA=%q: %v", tc.env, err)
			}
			c.oversubscribed = tc.oversubscribed
			before := measured
			off, from, send := c.shmCMA()
			if off != tc.off || from != tc.from || send != tc.send {
				t.Errorf("pays %v, OCCL_SHM_CMA=%q, %s, oversubscribed %v: shmCMA() = %v, %d, %v; want %v, %d, %v (%s)",
					pays, tc.env, tc.transport, tc.oversubscribed, off, from, send, tc.off, tc.from, tc.send, c.singleCopy())
			}
			// Whole blocks go through the rings from the streaming
			// copies' threshold where blocks are lent from
			// lendMinUncached only.
			wantRing := 0
			if tc.from == lendMinUncached && !tc.send {
				wantRing = max(memcopy.StreamMin(), lendMinUncached+1)
			}
			if got := c.shmRing(); got != wantRing {
				t.Errorf("pays %v, OCCL_SHM_CMA=%q, %s, oversubscribed %v: shmRing() = %d, want %d",
					pays, tc.env, tc.transport, tc.oversubscribed, got, wantRing)
			}
			if got := c.shmWhole(); got != tc.whole {
				t.Errorf("pays %v, OCCL_SHM_CMA=%q, %s, oversubscribed %v: shmWhole() = %d, want %d (%s)",
					pays, tc.env, tc.transport, tc.oversubscribed, got, tc.whole, c.singleCopy())
			}
			wantOffer := 0
			switch {
			case tc.off || tc.send:
			case tc.oversubscribed:
				wantOffer = offerMinShared
			default:
				wantOffer = offerMinCore
			}
			if got := c.shmOffer(); got != wantOffer {
				t.Errorf("pays %v, OCCL_SHM_CMA=%q, %s, oversubscribed %v: shmOffer() = %d, want %d",
					pays, tc.env, tc.transport, tc.oversubscribed, got, wantOffer)
			}
			if got := measured > before; got != tc.measures {
				t.Errorf("pays %v, OCCL_SHM_CMA=%q, %s, oversubscribed %v: asked the machine's rates: %v, want %v",
					pays, tc.env, tc.transport, tc.oversubscribed, got, tc.measures)
			}
		}
	}
	t.Setenv("OCCL_SHM_CMA", "lend")
	c, err := newConfig([]Option{WithSingleCopy(1 << 20)})
	if err != nil {
		t.Fatal(err)
	}
	if off, from, send := c.shmCMA(); off || from != 1<<20 || !send {
		t.Errorf("WithSingleCopy(1 MiB) after OCCL_SHM_CMA=lend: shmCMA() = %v, %d, %v", off, from, send)
	}
	// WithLending lends whatever the rates say, over an earlier
	// WithSingleCopy and OCCL_SHM_CMA=off.
	singleCopyPays = func() bool { t.Error("WithLending asked the machine's rates"); return false }
	t.Setenv("OCCL_SHM_CMA", "off")
	if c, err = newConfig([]Option{WithSingleCopy(1 << 20), WithLending()}); err != nil {
		t.Fatal(err)
	}
	if off, from, send := c.shmCMA(); off || from != lendMinCore || send {
		t.Errorf("WithLending after WithSingleCopy(1 MiB): shmCMA() = %v, %d, %v; want false, %d, false", off, from, send, lendMinCore)
	}
}
