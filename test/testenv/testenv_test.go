package testenv

import (
	"os"
	"testing"

	"golang.org/x/mod/modfile"
	"k8s.io/client-go/discovery"
)

// TestTheAPIServerReportsTheReleaseItIsBuiltFrom: Cluster API, and any client that
// checks, refuses a kube-apiserver that says v0.0.0-master. hack/envtest.sh stamps the
// k8s.io/kubernetes release it builds, which /version then reports.
func TestTheAPIServerReportsTheReleaseItIsBuiltFrom(t *testing.T) {
	Assets(t)
	data, err := os.ReadFile(RepoPath("hack/tools/envtest/go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want string
	for _, r := range mod.Require {
		if r.Mod.Path == "k8s.io/kubernetes" {
			want = r.Mod.Version
		}
	}
	if want == "" {
		t.Fatal("hack/tools/envtest/go.mod requires no k8s.io/kubernetes")
	}
	env, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	v, err := discovery.NewDiscoveryClientForConfigOrDie(env.Config).ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != want || v.Major != "1" || v.Minor == "" || v.Minor == "0" {
		t.Errorf("the API server reports %s (major %q, minor %q), want %s", v.GitVersion, v.Major, v.Minor, want)
	}
}
