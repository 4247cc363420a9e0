package topo

import (
	"os"
	"strings"
)

// LocalHostID returns an identity for the machine this process runs on.
// Processes that return the same id share memory and are treated as one
// host. OCCL_HOSTID overrides it (to emulate several hosts on one machine,
// or to group containers); otherwise it is the hostname joined with the
// kernel boot id, so two machines that share a hostname by accident are
// still told apart.
func LocalHostID() string {
	if id := os.Getenv("OCCL_HOSTID"); id != "" {
		return id
	}
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "localhost"
	}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		if boot := strings.TrimSpace(string(b)); boot != "" {
			return name + "/" + boot
		}
	}
	return name
}

// Hostname returns the part of a host id before the boot id, for messages.
func Hostname(hostID string) string {
	name, _, _ := strings.Cut(hostID, "/")
	return name
}
