package hugemem

import "strings"

// SharedPolicyFile is where Linux shows its policy for transparent huge
// pages in the shared memory it keeps itself (memory files of
// memfd_create, shared anonymous mappings; a tmpfs mount such as /dev/shm
// has its own huge= option, which "force" and "deny" here override),
// which decides whether a shared buffer of Alloc, advised for huge pages,
// gets them.
const SharedPolicyFile = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"

// SharedPolicy returns the system's policy for transparent huge pages in
// shared memory ("never", "advise", ...; "" where it cannot be read, as
// on systems without the file) and whether it lets the shared buffers of
// Alloc from PageSize up have huge pages. "never" (a common default) and
// "deny" do not: the buffers then work on 4 KiB pages, whose TLB misses
// a large collective pays in every copy (on a 2-core AMD EPYC virtual
// machine, 2 processes on shared memory, medians of 5 interleaved rounds,
// "never" against "advise": 16 MiB AllToAll 917 against 726 us, 64 MiB
// 5243 against 4628 us; 16 MiB AllReduce 2394 against 2162 us, 64 MiB
// 11060 against 10569 us). "advise" gives huge pages to the mappings
// that ask for them only, as occl's do.
func SharedPolicy() (policy string, huge bool) {
	return parsePolicy(readPolicy())
}

// parsePolicy reads the policy out of the contents of SharedPolicyFile,
// which lists every choice with the one in force in brackets.
func parsePolicy(s string) (policy string, huge bool) {
	for _, f := range strings.Fields(s) {
		if len(f) > 2 && f[0] == '[' && f[len(f)-1] == ']' {
			policy = f[1 : len(f)-1]
			break
		}
	}
	switch policy {
	case "always", "within_size", "advise", "force":
		return policy, true
	}
	return policy, false
}
