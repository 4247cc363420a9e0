package hugemem

import (
	"os"
	"testing"
)

// TestParsePolicy reads the policy in force out of the file's contents
// for every choice the kernel offers, and for contents that show none.
func TestParsePolicy(t *testing.T) {
	for _, c := range []struct {
		in     string
		policy string
		huge   bool
	}{
		{"always within_size advise [never] deny force\n", "never", false},
		{"always within_size [advise] never deny force\n", "advise", true},
		{"[always] within_size advise never deny force\n", "always", true},
		{"always [within_size] advise never deny force\n", "within_size", true},
		{"always within_size advise never [deny] force\n", "deny", false},
		{"always within_size advise never deny [force]\n", "force", true},
		{"always within_size advise never deny force\n", "", false},
		{"[] advise", "", false},
		{"", "", false},
	} {
		policy, huge := parsePolicy(c.in)
		if policy != c.policy || huge != c.huge {
			t.Errorf("parsePolicy(%q) = %q, %v; want %q, %v", c.in, policy, huge, c.policy, c.huge)
		}
	}
}

// TestSharedPolicyReadsTheSystem checks SharedPolicy against the file it
// reads, where the system has it.
func TestSharedPolicyReadsTheSystem(t *testing.T) {
	b, err := os.ReadFile(SharedPolicyFile)
	if err != nil {
		t.Skipf("no %s: %v", SharedPolicyFile, err)
	}
	want, wantHuge := parsePolicy(string(b))
	if want == "" {
		t.Fatalf("%s shows no policy in brackets: %q", SharedPolicyFile, b)
	}
	if got, huge := SharedPolicy(); got != want || huge != wantHuge {
		t.Errorf("SharedPolicy() = %q, %v; the file says %q, %v", got, huge, want, wantHuge)
	}
}
