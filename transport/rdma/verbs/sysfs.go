package verbs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// SysfsRoot is where the kernel describes RDMA devices. Tests point it
// elsewhere.
var SysfsRoot = "/sys/class/infiniband"

// GIDAttrs reads the type and network device of a GID table entry from
// sysfs (ports/<port>/gid_attrs/{types,ndevs}/<index>), as NCCL and
// rdma-core's tools do. ok is false when the kernel does not say (an old
// kernel, or an InfiniBand port, whose entries have no type file).
func GIDAttrs(root, dev string, port, index int) (t GIDType, netdev string, ok bool) {
	base := filepath.Join(root, dev, "ports", strconv.Itoa(port), "gid_attrs")
	b, err := os.ReadFile(filepath.Join(base, "types", strconv.Itoa(index)))
	if err != nil {
		return GIDTypeIB, "", false
	}
	if n, err := os.ReadFile(filepath.Join(base, "ndevs", strconv.Itoa(index))); err == nil {
		netdev = strings.TrimSpace(string(n))
	}
	return ParseGIDType(string(b)), netdev, true
}

// ParseGIDType parses the text of a sysfs gid_attrs/types entry: "IB/RoCE
// v1" or "RoCE v2".
func ParseGIDType(s string) GIDType {
	s = strings.ToLower(strings.TrimSpace(s))
	switch {
	case strings.Contains(s, "v2"):
		return GIDTypeRoCEv2
	case strings.Contains(s, "roce"):
		return GIDTypeRoCEv1
	}
	return GIDTypeIB
}
