//go:build !(rdma && cgo)

package verbs

// Compiled reports whether this binary can use real RDMA devices through
// libibverbs. It is false: the binary was built without the rdma build tag
// (or without cgo), and only the emulated devices exist.
const Compiled = false

// Devices lists the RDMA devices of the machine. Without libibverbs
// support it fails with ErrNotCompiled.
func Devices() ([]DeviceInfo, error) {
	return nil, &Error{Func: "ibv_get_device_list", Err: ErrNotCompiled}
}

// Open opens a device by name. Without libibverbs support it fails with
// ErrNotCompiled.
func Open(name string) (Device, error) {
	return nil, &Error{Func: "ibv_open_device", Err: ErrNotCompiled, Msg: name}
}
