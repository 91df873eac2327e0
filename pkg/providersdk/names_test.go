package providersdk

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNamesAreMadeValidForLabelsAndDNS(t *testing.T) {
	long := "a-very-long-cluster-name-that-goes-on-and-on-well-past-the-sixty-three-byte-limit"
	tests := []struct {
		name, in, wantDNS, wantLabel string
	}{
		{"plain names pass", "dc0", "dc0", "dc0"},
		{"upper case is lowered for DNS only", "DC0_C0", "dc0-c0", "DC0_C0"},
		{"other characters are replaced", "Rack 1/Row A", "rack-1-row-a", "Rack_1_Row_A"},
		{"punctuation at the ends goes", "-.kvm-1._", "kvm-1", "kvm-1"},
		{"nothing left gives the fallback", "***", "fallback", ""},
		{"long names are cut to 63", long, long[:63], long[:63]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DNSLabel(tt.in, "fallback"); got != tt.wantDNS {
				t.Errorf("DNSLabel(%q) = %q, want %q", tt.in, got, tt.wantDNS)
			}
			if got := LabelValue(tt.in); got != tt.wantLabel {
				t.Errorf("LabelValue(%q) = %q, want %q", tt.in, got, tt.wantLabel)
			}
		})
	}
}

// Each backend's rules, as its driver passes them.
var (
	vsphereNames = NameRules{MaxLen: 80}
	libvirtNames = NameRules{MaxLen: 100}
	proxmoxNames = NameRules{MaxLen: 63, DNSLabel: true}
)

func TestBackendNamesFollowTheBackendsRules(t *testing.T) {
	ns63, name253 := strings.Repeat("n", 63), strings.Repeat("m", 253)
	tests := []struct {
		name, namespace, machine string
		rules                    NameRules
		want                     string
	}{
		{"a short name keeps namespace and name around a dot", "tenant-a", "b-web", vsphereNames, "tenant-a.b-web"},
		{"the namespace ends at the first dot", "tenant-a-b", "web", vsphereNames, "tenant-a-b.web"},
		{"a name with dots keeps them", "team-a", "web.1", libvirtNames, "team-a.web.1"},
		{"a DNS label always carries the hash", "tenant-a", "b-web", proxmoxNames, "tenant-a-b-web-qeiqsp5nh2"},
		{"the other half of the pair gets another hash", "tenant-a-b", "web", proxmoxNames, "tenant-a-b-web-euwfvi2l22"},
		{"a DNS label turns dots into dashes", "team-a", "web.1", proxmoxNames, "team-a-web-1-volljxl25v"},
		{"a long name is cut to vSphere's 80 with the whole namespace kept",
			ns63, name253, vsphereNames, ns63 + ".mmmmm-bjdrhsuoot"},
		{"a long name is cut to libvirt's 100", ns63, name253, libvirtNames, ns63 + "." + strings.Repeat("m", 25) + "-bjdrhsuoot"},
		{"a long name is cut to a DNS label's 63", ns63, name253, proxmoxNames, strings.Repeat("n", 52) + "-bjdrhsuoot"},
		{"upper case and other characters are lowered and replaced, with the hash",
			"Team-A", "Web_1", vsphereNames, "team-a.web-1-che3hhhn7a"},
		{"bytes that are not ASCII are replaced, with the hash", "tenant-a", "wéb", libvirtNames, "tenant-a.w--b-lo7b24iz5s"},
		{"nothing readable leaves the hash alone", "", "", proxmoxNames, "rjpnvmucmm"},
		{"a DNS label is at most 63 whatever MaxLen says",
			ns63, name253, NameRules{MaxLen: 200, DNSLabel: true}, strings.Repeat("n", 52) + "-bjdrhsuoot"},
		{"a MaxLen below the minimum counts as the minimum", "tenant-a", "web", NameRules{MaxLen: 3}, "tenant-a.web"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BackendName(tt.namespace, tt.machine, tt.rules)
			if got != tt.want {
				t.Errorf("BackendName(%q, %q, %+v) = %q, want %q", tt.namespace, tt.machine, tt.rules, got, tt.want)
			}
			checkBackendName(t, got, tt.rules)
		})
	}
}

// checkBackendName fails t when name is not one the backend of rules takes.
func checkBackendName(t *testing.T, name string, rules NameRules) {
	t.Helper()
	limit := max(rules.MaxLen, MinBackendNameLen)
	if rules.DNSLabel {
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Errorf("%q is no DNS label: %v", name, errs)
		}
	} else if strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-.") != "" {
		t.Errorf("%q has characters other than lowercase letters, digits, '-' and '.'", name)
	}
	if len(name) > limit || name == "" {
		t.Errorf("%q is %d bytes, want 1 to %d", name, len(name), limit)
	}
}

func TestBackendNamesOfTrickyPairsDiffer(t *testing.T) {
	ns63 := strings.Repeat("n", 63)
	tests := []struct {
		name  string
		pairs [][2]string
	}{
		{"a dash moved between namespace and name", [][2]string{{"tenant-a", "b-web"}, {"tenant-a-b", "web"}}},
		{"a dot or a dash in the name", [][2]string{{"team-a", "web.1"}, {"team-a", "web-1"}}},
		{"a name that looks like a cut one", [][2]string{{"team-a", "web"}, {"team-a", "web-u3lireytyi"}}},
		{"long names that differ after the cut",
			[][2]string{{ns63, strings.Repeat("m", 253)}, {ns63, strings.Repeat("m", 252) + "x"}, {ns63, strings.Repeat("m", 200)}}},
		{"long namespaces that differ in their last character",
			[][2]string{{strings.Repeat("n", 62) + "a", strings.Repeat("m", 100)}, {strings.Repeat("n", 62) + "b", strings.Repeat("m", 100)}}},
		{"a namespace that swallows the name's first label", [][2]string{{"a", "b.c"}, {"a-b", "c"}, {"a", "b-c"}}},
		{"upper case made lower", [][2]string{{"team-a", "web"}, {"Team-A", "Web"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, rules := range []NameRules{vsphereNames, libvirtNames, proxmoxNames} {
				seen := map[string][2]string{}
				for _, p := range tt.pairs {
					got := BackendName(p[0], p[1], rules)
					if other, dup := seen[got]; dup {
						t.Errorf("%+v: %s/%s and %s/%s both get %q", rules, other[0], other[1], p[0], p[1], got)
					}
					seen[got] = p
				}
			}
		})
	}
}

// TestBackendNamesOfAllShortPairsDiffer tries every pair of a namespace and a name the
// API server accepts, made of "a", "-" and "." up to a length, where moving a '-' or a
// '.' between the two is easiest: no two get one backend name.
func TestBackendNamesOfAllShortPairsDiffer(t *testing.T) {
	namespaces := kubernetesNames("a1-", 5, validation.IsDNS1123Label)
	names := kubernetesNames("a1-.", 5, validation.IsDNS1123Subdomain)
	for _, rules := range []NameRules{vsphereNames, libvirtNames, proxmoxNames} {
		seen := make(map[string][2]string, len(namespaces)*len(names))
		for _, ns := range namespaces {
			for _, n := range names {
				got := BackendName(ns, n, rules)
				if other, dup := seen[got]; dup {
					t.Fatalf("%+v: %s/%s and %s/%s both get %q", rules, other[0], other[1], ns, n, got)
				}
				seen[got] = [2]string{ns, n}
			}
		}
	}
}

// kubernetesNames are the strings of alphabet up to maxLen long that valid accepts.
func kubernetesNames(alphabet string, maxLen int, valid func(string) []string) []string {
	var out []string
	level := []string{""}
	for range maxLen {
		next := make([]string, 0, len(level)*len(alphabet))
		for _, s := range level {
			for _, c := range alphabet {
				next = append(next, s+string(c))
			}
		}
		for _, s := range next {
			if len(valid(s)) == 0 {
				out = append(out, s)
			}
		}
		level = next
	}
	return out
}

// FuzzBackendName checks that two different pairs of names the API server accepts never
// get the same backend name, and that every name is one the backend takes.
func FuzzBackendName(f *testing.F) {
	f.Add("tenant-a", "b-web", "tenant-a-b", "web")
	f.Add("team-a", "web.1", "team-a", "web-1")
	f.Add(strings.Repeat("n", 63), strings.Repeat("m", 253), strings.Repeat("n", 63), strings.Repeat("m", 252)+"x")
	f.Fuzz(func(t *testing.T, ns1, name1, ns2, name2 string) {
		for _, rules := range []NameRules{vsphereNames, libvirtNames, proxmoxNames} {
			a, b := BackendName(ns1, name1, rules), BackendName(ns2, name2, rules)
			checkBackendName(t, a, rules)
			if a == b && (ns1 != ns2 || name1 != name2) && valid(ns1, name1) && valid(ns2, name2) {
				t.Errorf("%+v: %s/%s and %s/%s both get %q", rules, ns1, name1, ns2, name2, a)
			}
		}
	})
}

// valid reports whether the API server accepts namespace and name.
func valid(namespace, name string) bool {
	return len(validation.IsDNS1123Label(namespace)) == 0 && len(validation.IsDNS1123Subdomain(name)) == 0
}
