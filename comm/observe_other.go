//go:build !unix

package comm

import "github.com/occl/occl/internal/logx"

// watchSignal warns that there is no SIGUSR1 to dump the flight record on.
func watchSignal(c *Communicator) {
	logx.For(c.log, logx.Init).Warn("occl: " + FlightRecorderSignalEnv + " ignored: this platform has no SIGUSR1")
}

func unwatchSignal(*Communicator) {}
