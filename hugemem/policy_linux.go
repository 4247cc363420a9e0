package hugemem

import "os"

// readPolicy returns the contents of SharedPolicyFile, "" where it cannot
// be read.
func readPolicy() string {
	b, err := os.ReadFile(SharedPolicyFile)
	if err != nil {
		return ""
	}
	return string(b)
}
