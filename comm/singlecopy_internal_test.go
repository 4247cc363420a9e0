package comm

import (
	"testing"

	"github.com/occl/occl/transport/shm"
)

// The shared-memory single-copy setting follows OCCL_SHM_CMA, and by
// default lends all-to-all blocks when the ranks outnumber the cores and
// otherwise as this machine's rates say.
func TestSingleCopySetting(t *testing.T) {
	pays := shm.MeasureSingleCopy().Pays()
	t.Logf("this machine: %v", shm.MeasureSingleCopy())
	autoFrom := lendMinUncached
	if pays {
		autoFrom = lendMinCore
	}
	cases := []struct {
		env            string
		oversubscribed bool
		off            bool
		from           int
		send           bool
	}{
		{"", false, false, autoFrom, false},
		{"auto", false, false, autoFrom, false},
		{"", true, false, lendMinShared, false},
		{"lend", false, false, lendMinCore, false},
		{"LEND", true, false, lendMinShared, false},
		{"off", false, true, 0, false},
		{"off", true, true, 0, false},
		{"0", false, true, 0, false},
		{"64K", false, false, 64 << 10, true},
		{"64K", true, false, 64 << 10, true},
	}
	for _, tc := range cases {
		t.Setenv("OCCL_SHM_CMA", tc.env)
		c, err := newConfig(nil)
		if err != nil {
			t.Fatalf("OCCL_SHM_CMA=%q: %v", tc.env, err)
		}
		c.oversubscribed = tc.oversubscribed
		off, from, send := c.shmCMA()
		if off != tc.off || from != tc.from || send != tc.send {
			t.Errorf("OCCL_SHM_CMA=%q oversubscribed %v: shmCMA() = %v, %d, %v; want %v, %d, %v (%s)",
				tc.env, tc.oversubscribed, off, from, send, tc.off, tc.from, tc.send, c.singleCopy())
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
}
