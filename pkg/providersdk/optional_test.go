package providersdk_test

import (
	"testing"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

func TestProviderOffers(t *testing.T) {
	p := &banlieuev1.Provider{Spec: banlieuev1.ProviderSpec{
		Parameters: map[string]string{"datastore": "ds-default"},
		Capabilities: banlieuev1.Capabilities{
			StorageClasses: []banlieuev1.ClassMapping{{Name: "fast", Target: map[string]string{"datastore": "ds-ssd"}}},
			NetworkClasses: []banlieuev1.ClassMapping{{Name: "prod", Target: map[string]string{"network": "prod-net"}}},
		},
	}}
	for _, tt := range []struct {
		name, key, value string
		want             bool
	}{
		{"the value of its parameter is offered", "datastore", "ds-default", true},
		{"the value of a storage class's target is offered", "datastore", "ds-ssd", true},
		{"the value of a network class's target is offered", "network", "prod-net", true},
		{"another value is not", "datastore", "ds-tenant-b", false},
		{"a value under another key is not", "network", "ds-ssd", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := providersdk.ProviderOffers(p, tt.key, tt.value); got != tt.want {
				t.Errorf("ProviderOffers(%q, %q) = %v, want %v", tt.key, tt.value, got, tt.want)
			}
		})
	}
}

func TestWithinPath(t *testing.T) {
	for _, tt := range []struct {
		name, path, root string
		want             bool
	}{
		{"the root itself is within it", "/dc1/vm/team-a", "/dc1/vm/team-a", true},
		{"a folder below the root is within it", "/dc1/vm/team-a/web", "/dc1/vm/team-a", true},
		{"a root written with a trailing slash counts the same", "team-a/web", "team-a/", true},
		{"a sibling sharing a prefix is not", "/dc1/vm/team-ab", "/dc1/vm/team-a", false},
		{"a folder above the root is not", "/dc1/vm", "/dc1/vm/team-a", false},
		{"every path is within no root", "/anything", "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := providersdk.WithinPath(tt.path, tt.root); got != tt.want {
				t.Errorf("WithinPath(%q, %q) = %v, want %v", tt.path, tt.root, got, tt.want)
			}
		})
	}
}
