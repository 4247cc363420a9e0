//go:build unix

package comm

import "testing"

// registered reports whether c gets SIGUSR1 dumps.
func registered(c *Communicator) bool {
	flightSignal.mu.Lock()
	defer flightSignal.mu.Unlock()
	_, ok := flightSignal.comms[c]
	return ok
}

// TestSignalOnlyWhenAsked: without OCCL_FLIGHT_RECORDER_SIGNAL no
// communicator takes SIGUSR1; with it they do until they close.
func TestSignalOnlyWhenAsked(t *testing.T) {
	t.Setenv(FlightRecorderSignalEnv, "")
	plain, err := NewLocal(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(FlightRecorderSignalEnv, "1")
	asked, err := NewLocal(2)
	if err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		if registered(plain[r]) || !registered(asked[r]) {
			t.Errorf("rank %d: registered without the variable %v, with it %v", r, registered(plain[r]), registered(asked[r]))
		}
	}
	for _, cs := range [][]*Communicator{plain, asked} {
		for _, c := range cs {
			c.Abort()
		}
	}
	for r := range 2 {
		if registered(asked[r]) {
			t.Errorf("rank %d still registered after it closed", r)
		}
	}
}
