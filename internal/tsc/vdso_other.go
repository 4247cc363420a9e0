//go:build !linux

package tsc

// vdsoReadsCounter reports false: paravirtual clocks are recognized on
// Linux only.
func vdsoReadsCounter() bool { return false }
