package devenv

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	vspheresim "github.com/banlieue/banlieue/sim/vsphere"
	"github.com/banlieue/banlieue/test/testenv"
)

func TestStartRefusesIncompleteInput(t *testing.T) {
	assets := t.TempDir()
	for _, bin := range []string{"etcd", "kube-apiserver", "kubectl"} {
		if err := os.WriteFile(filepath.Join(assets, bin), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		options Options
		want    string
	}{
		{
			name:    "no assets folder given",
			options: Options{CRDs: []string{t.TempDir()}, Dir: t.TempDir()},
			want:    "no envtest assets: pass --assets",
		},
		{
			name:    "assets folder without the binaries",
			options: Options{Assets: t.TempDir(), CRDs: []string{t.TempDir()}, Dir: t.TempDir()},
			want:    "are incomplete (etcd missing)",
		},
		{
			name:    "CRD folder that does not exist",
			options: Options{Assets: assets, CRDs: []string{filepath.Join(t.TempDir(), "missing")}, Dir: t.TempDir()},
			want:    "no CRDs at",
		},
		{
			name:    "admission folder that does not exist",
			options: Options{Assets: assets, CRDs: []string{t.TempDir()}, Admission: filepath.Join(t.TempDir(), "missing"), Dir: t.TempDir()},
			want:    "no admission policies at",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, err := Start(tt.options)
			if err == nil {
				_ = env.Stop()
				t.Fatal("Start succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Start error = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestStartStopsTheControlPlaneWhenACRDIsRejected checks that a CRD the API server
// rejects leaves no etcd or kube-apiserver behind: their temporary folders, which
// envtest removes only when it stops them, are gone.
func TestStartStopsTheControlPlaneWhenACRDIsRejected(t *testing.T) {
	assets := testenv.Assets(t)
	crds := t.TempDir()
	// No version is the storage version, so the API server rejects this CRD.
	bad := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: things.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: things, kind: Thing}
  versions:
    - {name: v1, served: true, storage: false, schema: {openAPIV3Schema: {type: object}}}
`
	if err := os.WriteFile(filepath.Join(crds, "thing.yaml"), []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)

	env, err := Start(Options{Assets: assets, CRDs: []string{crds}, Admission: t.TempDir(), Dir: t.TempDir()})
	if err == nil {
		_ = env.Stop()
		t.Fatal("Start succeeded with a rejected CRD, want an error")
	}
	if !strings.Contains(err.Error(), "things.example.com") {
		t.Fatalf("Start error = %q, want it to name the rejected CRD", err)
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("left behind after a failed start: %s", e.Name())
	}
}

func TestTheVSphereManifestAppliesAsTheObjectsDevCreates(t *testing.T) {
	vs := &vspheresim.Simulator{URL: &url.URL{Scheme: "https", Host: "127.0.0.1:8989", Path: "/sdk"}, Username: "u", Password: "p", CACert: []byte("PEM\n")}
	manifest, err := Manifest(VSphereObjects(vs)...)
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(manifest, "---\n")
	if len(docs) != 2 {
		t.Fatalf("%d documents, want a Secret and a Provider:\n%s", len(docs), manifest)
	}
	var p banlieuev1.Provider
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &p); err != nil {
		t.Fatalf("the Provider does not decode strictly: %v\n%s", err, docs[1])
	}
	want := VSphereObjects(vs)[1].(*banlieuev1.Provider)
	if diff := cmp.Diff(want, &p); diff != "" {
		t.Errorf("Provider (-want +got):\n%s", diff)
	}
	for _, field := range []string{"creationTimestamp", "status:"} {
		if strings.Contains(manifest, field) {
			t.Errorf("the manifest carries an empty %s", field)
		}
	}
}
