package admission

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadManifestsReadsEveryObjectButTheKustomization(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []string // kind/name, or the error's text
	}{
		{
			name: "the repository's policy and binding",
			files: func() map[string]string {
				data, err := os.ReadFile(filepath.Join("..", "..", Dir, "virtualmachine-finalizer.yaml"))
				if err != nil {
					t.Fatal(err)
				}
				return map[string]string{"virtualmachine-finalizer.yaml": string(data), "kustomization.yaml": "resources: [virtualmachine-finalizer.yaml]\n"}
			}(),
			want: []string{"MutatingAdmissionPolicy/banlieue-virtualmachine-finalizer", "MutatingAdmissionPolicyBinding/banlieue-virtualmachine-finalizer"},
		},
		{
			name:  "empty documents are skipped",
			files: map[string]string{"a.yaml": "---\n# nothing\n---\nkind: A\nmetadata: {name: a}\n---\n"},
			want:  []string{"A/a"},
		},
		{
			name:  "only a kustomization",
			files: map[string]string{"kustomization.yaml": "resources: []\n"},
			want:  []string{"no admission policies in"},
		},
		{
			name:  "a file that is not YAML",
			files: map[string]string{"bad.yaml": "kind: [\n"},
			want:  []string{"failed to read"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			objs, err := readManifests(dir)
			var got []string
			if err != nil {
				if !strings.Contains(err.Error(), tc.want[0]) {
					t.Fatalf("error %q, want it to contain %q", err, tc.want[0])
				}
				return
			}
			for _, o := range objs {
				got = append(got, o.GetKind()+"/"+o.GetName())
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("read %v, want %v", got, tc.want)
			}
		})
	}
}
