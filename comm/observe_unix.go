//go:build unix

package comm

import (
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/occl/occl/internal/logx"
)

// flightSignal is the SIGUSR1 handler shared by the communicators that
// asked for it (OCCL_FLIGHT_RECORDER_SIGNAL=1). It is installed while at
// least one of them is alive.
var flightSignal struct {
	mu    sync.Mutex
	comms map[*Communicator]struct{}
	ch    chan os.Signal
}

// watchSignal registers c for flight-record dumps on SIGUSR1.
func watchSignal(c *Communicator) {
	s := &flightSignal
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan os.Signal, 1)
		s.comms = map[*Communicator]struct{}{}
		go dumpOnSignal(s.ch)
	}
	if len(s.comms) == 0 {
		signal.Notify(s.ch, syscall.SIGUSR1)
	}
	s.comms[c] = struct{}{}
}

// unwatchSignal unregisters c; the last one to go uninstalls the handler.
func unwatchSignal(c *Communicator) {
	s := &flightSignal
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.comms[c]; !ok {
		return
	}
	delete(s.comms, c)
	if len(s.comms) == 0 {
		signal.Stop(s.ch)
	}
}

func dumpOnSignal(ch <-chan os.Signal) {
	for range ch {
		s := &flightSignal
		s.mu.Lock()
		comms := make([]*Communicator, 0, len(s.comms))
		for c := range s.comms {
			comms = append(comms, c)
		}
		s.mu.Unlock()
		for _, c := range comms {
			l := logx.For(c.log, logx.Coll)
			if path, err := c.writeFlightRecord(c.Err()); err != nil {
				l.Warn("occl: SIGUSR1: could not write the flight record", "err", err)
			} else {
				l.Warn("occl: SIGUSR1: flight record written", "path", path)
			}
		}
	}
}
