package providersdk

import "testing"

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
