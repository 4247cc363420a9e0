package rdma

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/Mellanox/rdmamap"

	"github.com/occl/occl/transport/rdma/verbs"
)

// DeviceConfig selects the device, port and GID a process's connections
// use. DeviceConfigFromEnv fills it from the environment.
type DeviceConfig struct {
	// HCA restricts the devices and ports, in NCCL_IB_HCA's syntax
	// (OCCL_IB_HCA): a comma-separated list of device[:port] entries,
	// matched as prefixes ("mlx5" matches mlx5_0 and mlx5_1), exactly
	// with a leading "=", and excluded with a leading "^". An entry may
	// also name a network interface, which stands for the RDMA device
	// behind it. "" allows every device.
	HCA string
	// GIDIndex forces the GID table index (OCCL_IB_GID_INDEX); -1 selects
	// one (see SelectGID).
	GIDIndex int
	// Emulate uses emulated verbs instead of a device (OCCL_IB_EMULATE=1,
	// or "ib" for an emulated InfiniBand port).
	Emulate bool
	// EmulateIB gives the emulated device an InfiniBand port (LID
	// routing) instead of RoCE.
	EmulateIB bool
	// Netdev, if set, is a network interface whose RDMA device is
	// preferred (comm passes the interface that reaches rank 0).
	Netdev string
	// CacheBytes and CacheEntries bound the registration cache (0: the
	// defaults).
	CacheBytes   int64
	CacheEntries int
	// Emulated, if set, is the emulated device to use (tests open
	// several in one process).
	Emulated *verbs.EmuDevice
}

// DeviceConfigFromEnv reads OCCL_IB_HCA, OCCL_IB_GID_INDEX and
// OCCL_IB_EMULATE.
func DeviceConfigFromEnv() (DeviceConfig, error) {
	c := DeviceConfig{HCA: os.Getenv("OCCL_IB_HCA"), GIDIndex: -1}
	if v := os.Getenv("OCCL_IB_GID_INDEX"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 255 {
			return c, fmt.Errorf("rdma: OCCL_IB_GID_INDEX=%q: want 0 to 255", v)
		}
		c.GIDIndex = n
	}
	switch v := strings.ToLower(os.Getenv("OCCL_IB_EMULATE")); v {
	case "", "0", "false", "off":
	case "1", "true", "on", "roce":
		c.Emulate = true
	case "ib":
		c.Emulate, c.EmulateIB = true, true
	default:
		return c, fmt.Errorf("rdma: OCCL_IB_EMULATE=%q: want 1 (RoCE), ib or 0", v)
	}
	return c, nil
}

// HCAFilter is a parsed OCCL_IB_HCA list.
type HCAFilter struct {
	Exclude bool
	Exact   bool
	Entries []HCAEntry
}

// HCAEntry is one device[:port] of an HCA list; Port 0 means any port.
type HCAEntry struct {
	Name string
	Port int
}

// ParseHCA parses a list in NCCL_IB_HCA's syntax.
func ParseHCA(s string) (HCAFilter, error) {
	var f HCAFilter
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "^") {
		f.Exclude, s = true, s[1:]
	}
	if strings.HasPrefix(s, "=") {
		f.Exact, s = true, s[1:]
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, port, hasPort := strings.Cut(part, ":")
		e := HCAEntry{Name: name}
		if hasPort {
			p, err := strconv.Atoi(port)
			if err != nil || p < 1 || p > 255 {
				return f, fmt.Errorf("rdma: HCA entry %q: bad port", part)
			}
			e.Port = p
		}
		if name == "" {
			return f, fmt.Errorf("rdma: HCA entry %q: no device", part)
		}
		f.Entries = append(f.Entries, e)
	}
	return f, nil
}

// Match reports whether device dev is allowed, and which port the list
// names for it (0: any).
func (f HCAFilter) Match(dev string) (ok bool, port int) {
	if len(f.Entries) == 0 {
		return true, 0
	}
	for _, e := range f.Entries {
		if e.Name == dev || (!f.Exact && strings.HasPrefix(dev, e.Name)) {
			return !f.Exclude, e.Port
		}
	}
	return f.Exclude, 0
}

// resolveNetdevs replaces entries that name a network interface by the
// RDMA device behind it (through rdmamap).
func (f HCAFilter) resolveNetdevs(devs map[string]bool) HCAFilter {
	out := f
	out.Entries = nil
	for _, e := range f.Entries {
		if !devs[e.Name] {
			if d, err := rdmamap.GetRdmaDeviceForNetdevice(e.Name); err == nil && d != "" {
				e.Name = d
			}
		}
		out.Entries = append(out.Entries, e)
	}
	return out
}

// SelectGID chooses the GID table entry of a port. With want >= 0 that
// index is used (and must hold a GID). Otherwise, on InfiniBand, index 0;
// on Ethernet (RoCE), NCCL's default preference: a RoCE v2 entry holding
// an IPv4-mapped address, then a RoCE v2 entry with a routable IPv6
// address, then any RoCE v2 entry, then any non-zero entry.
func SelectGID(entries []verbs.GIDEntry, ll verbs.LinkLayer, want int) (verbs.GIDEntry, error) {
	if want >= 0 {
		for _, e := range entries {
			if e.Index == want {
				if e.GID.IsZero() && ll == verbs.LinkLayerEthernet {
					return e, fmt.Errorf("GID index %d is empty", want)
				}
				return e, nil
			}
		}
		return verbs.GIDEntry{}, fmt.Errorf("GID index %d not in the table", want)
	}
	if ll != verbs.LinkLayerEthernet {
		for _, e := range entries {
			if e.Index == 0 {
				return e, nil
			}
		}
		return verbs.GIDEntry{}, errors.New("no GID at index 0")
	}
	best, score := verbs.GIDEntry{}, 0
	for _, e := range entries {
		if e.GID.IsZero() {
			continue
		}
		s := 1
		if e.Type == verbs.GIDTypeRoCEv2 {
			switch {
			case e.GID.IsIPv4Mapped():
				s = 4
			case !e.GID.IsLinkLocal():
				s = 3
			default:
				s = 2
			}
		}
		if s > score {
			best, score = e, s
		}
	}
	if score == 0 {
		return best, errors.New("no usable GID (is the interface up and addressed?)")
	}
	return best, nil
}

// Device is an open RDMA device as a process's connections share it: the
// verbs context, the port and GID chosen, a protection domain and the
// registration cache of user buffers. OpenDevice returns the same Device
// for the same selection, counting references; Close drops one.
type Device struct {
	key      string
	dev      verbs.Device
	pd       verbs.ProtectionDomain
	port     int
	portAttr verbs.PortAttr
	attr     verbs.DeviceAttr
	gid      verbs.GIDEntry
	cache    *RegCache
	ownsDev  bool

	mu   sync.Mutex
	refs int
}

var registry = struct {
	sync.Mutex
	devs     map[string]*Device
	emulated map[verbs.LinkLayer]*verbs.EmuDevice // the process's emulated devices
}{devs: map[string]*Device{}, emulated: map[verbs.LinkLayer]*verbs.EmuDevice{}}

// ErrNoDevice is wrapped by OpenDevice's error when no device passes the
// selection.
var ErrNoDevice = verbs.ErrNoDevice

// OpenDevice opens the device cfg selects, or returns another reference to
// it if this process has it open.
//
// Real devices (binaries built with -tags rdma): the devices
// ibv_get_device_list returns, in order, filtered by cfg.HCA, the one
// behind cfg.Netdev first; the first port that is ACTIVE (the one the HCA
// entry names, if it does) and has a usable GID. Emulated verbs
// (cfg.Emulate): one emulated device per process, named emu0.
func OpenDevice(cfg DeviceConfig) (*Device, error) {
	filter, err := ParseHCA(cfg.HCA)
	if err != nil {
		return nil, err
	}
	registry.Lock()
	defer registry.Unlock()
	if cfg.Emulated != nil || cfg.Emulate {
		return openEmulated(cfg, filter)
	}
	if !verbs.Compiled {
		return nil, fmt.Errorf("rdma: %w: %w (set OCCL_IB_EMULATE=1 to run over emulated verbs)", ErrNoDevice, verbs.ErrNotCompiled)
	}
	infos, err := verbs.Devices()
	if err != nil {
		return nil, fmt.Errorf("rdma: %w", err)
	}
	if len(infos) == 0 {
		return nil, fmt.Errorf("rdma: %w: ibv_get_device_list found none (set OCCL_IB_EMULATE=1 to run over emulated verbs)", ErrNoDevice)
	}
	names := map[string]bool{}
	for _, in := range infos {
		names[in.Name] = true
	}
	filter = filter.resolveNetdevs(names)
	order := make([]string, 0, len(infos))
	if cfg.Netdev != "" && len(filter.Entries) == 0 {
		if d, err := rdmamap.GetRdmaDeviceForNetdevice(cfg.Netdev); err == nil && names[d] {
			order = append(order, d)
		}
	}
	for _, in := range infos {
		if len(order) == 0 || order[0] != in.Name {
			order = append(order, in.Name)
		}
	}
	var why []string
	for _, name := range order {
		ok, port := filter.Match(name)
		if !ok {
			why = append(why, name+": excluded by OCCL_IB_HCA")
			continue
		}
		key := fmt.Sprintf("%s/%d/%d", name, port, cfg.GIDIndex)
		if d := registry.devs[key]; d != nil {
			d.mu.Lock()
			d.refs++
			d.mu.Unlock()
			return d, nil
		}
		vd, err := verbs.Open(name)
		if err != nil {
			why = append(why, err.Error())
			continue
		}
		d, err := newDevice(vd, port, cfg)
		if err != nil {
			vd.Close()
			why = append(why, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		d.key, d.ownsDev = key, true
		registry.devs[key] = d
		return d, nil
	}
	return nil, fmt.Errorf("rdma: %w usable: %s", ErrNoDevice, strings.Join(why, "; "))
}

func openEmulated(cfg DeviceConfig, filter HCAFilter) (*Device, error) {
	ed := cfg.Emulated
	if ed == nil {
		ll, name := verbs.LinkLayerEthernet, "emu0"
		if cfg.EmulateIB {
			ll, name = verbs.LinkLayerInfiniBand, "emu_ib0"
		}
		if registry.emulated[ll] == nil {
			e, err := verbs.OpenEmulated(verbs.EmuConfig{Name: name, LinkLayer: ll, Namespace: os.Getenv("OCCL_IB_EMULATE_NS")})
			if err != nil {
				return nil, fmt.Errorf("rdma: emulated verbs: %w", err)
			}
			registry.emulated[ll] = e
		}
		ed = registry.emulated[ll]
	}
	ok, port := filter.Match(ed.Name())
	if !ok || (port != 0 && port != 1) {
		return nil, fmt.Errorf("rdma: %w: OCCL_IB_HCA=%q excludes the emulated device %s:1", ErrNoDevice, cfg.HCA, ed.Name())
	}
	key := fmt.Sprintf("emu:%p/%d", ed, cfg.GIDIndex)
	if d := registry.devs[key]; d != nil {
		d.mu.Lock()
		d.refs++
		d.mu.Unlock()
		return d, nil
	}
	d, err := newDevice(ed, 1, cfg)
	if err != nil {
		return nil, fmt.Errorf("rdma: %s: %w", ed.Name(), err)
	}
	d.key = key
	registry.devs[key] = d
	return d, nil
}

// newDevice picks the port and GID of an open device and allocates the
// protection domain. port 0 means the first active port.
func newDevice(vd verbs.Device, port int, cfg DeviceConfig) (*Device, error) {
	attr, err := vd.Query()
	if err != nil {
		return nil, err
	}
	ports := []int{port}
	if port == 0 {
		ports = ports[:0]
		for p := 1; p <= attr.PhysPortCnt; p++ {
			ports = append(ports, p)
		}
	}
	var why []string
	for _, p := range ports {
		pa, err := vd.QueryPort(p)
		if err != nil {
			why = append(why, err.Error())
			continue
		}
		if pa.State != verbs.PortActive {
			why = append(why, fmt.Sprintf("port %d is %v", p, pa.State))
			continue
		}
		var table []verbs.GIDEntry
		for i := 0; i < min(pa.GIDTableLen, 256); i++ {
			if e, err := vd.QueryGID(p, i); err == nil {
				if pa.LinkLayer == verbs.LinkLayerInfiniBand {
					e.Type = verbs.GIDTypeIB
				}
				table = append(table, e)
			}
		}
		g, err := SelectGID(table, pa.LinkLayer, cfg.GIDIndex)
		if err != nil {
			why = append(why, fmt.Sprintf("port %d: %v", p, err))
			continue
		}
		pd, err := vd.AllocPD()
		if err != nil {
			return nil, err
		}
		d := &Device{dev: vd, pd: pd, port: p, portAttr: pa, attr: attr, gid: g, refs: 1,
			cache: NewRegCache(pd, cfg.CacheBytes, cfg.CacheEntries)}
		return d, nil
	}
	if len(why) == 0 {
		why = append(why, "no ports")
	}
	return nil, errors.New(strings.Join(why, "; "))
}

// acquire adds a reference.
func (d *Device) acquire() {
	d.mu.Lock()
	d.refs++
	d.mu.Unlock()
}

// Close drops a reference; the last one closes the device.
func (d *Device) Close() error {
	registry.Lock()
	defer registry.Unlock()
	d.mu.Lock()
	d.refs--
	last := d.refs == 0
	d.mu.Unlock()
	if !last {
		return nil
	}
	if registry.devs[d.key] == d {
		delete(registry.devs, d.key)
	}
	d.cache.Purge()
	err := d.pd.Close()
	if d.ownsDev {
		if e := d.dev.Close(); err == nil {
			err = e
		}
	}
	return err
}

// Name is the device's name, Port the port used.
func (d *Device) Name() string { return d.dev.Name() }

// Port is the port the device's connections use.
func (d *Device) Port() int { return d.port }

// GID is the GID table entry the connections use.
func (d *Device) GID() verbs.GIDEntry { return d.gid }

// LinkLayer is the port's link layer.
func (d *Device) LinkLayer() verbs.LinkLayer { return d.portAttr.LinkLayer }

// Emulated reports whether the device is emulated.
func (d *Device) Emulated() bool { return d.dev.Emulated() }

// Cache is the device's registration cache.
func (d *Device) Cache() *RegCache { return d.cache }

// Verbs is the underlying verbs device.
func (d *Device) Verbs() verbs.Device { return d.dev }

// String describes the device as logs and occl-bench show it.
func (d *Device) String() string {
	s := fmt.Sprintf("%s:%d %s GID[%d] %v (%v)", d.Name(), d.port, d.portAttr.LinkLayer, d.gid.Index, d.gid.GID, d.gid.Type)
	if d.Emulated() {
		s += " [emulated verbs]"
	}
	return s
}

// OpenDevices describes the devices this process has open, for reports
// such as occl-bench's header.
func OpenDevices() []string {
	registry.Lock()
	defer registry.Unlock()
	var out []string
	for _, d := range registry.devs {
		out = append(out, d.String())
	}
	return out
}

// netdevOf returns the network interface that holds ip ("" if none).
func netdevOf(ip net.IP) string {
	ifs, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, ifi := range ifs {
		addrs, _ := ifi.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return ifi.Name
			}
		}
	}
	return ""
}
