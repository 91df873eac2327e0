package docs_test

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// crdDir holds the CRDs that `make generate` writes from the API's Go types.
const crdDir = "config/crd/bases"

// TestEveryCRDFieldHasADescription fails for each property of a CRD's schema that has no
// description, so that `kubectl explain <kind>.<path>` always has text to show. The
// description comes from the Go field's doc comment; fix the comment and run
// `make generate`. The root's apiVersion, kind and metadata are Kubernetes' own.
func TestEveryCRDFieldHasADescription(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, crdDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("found no CRDs in %s", crdDir)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			for _, missing := range undescribedFields(t, path) {
				t.Errorf("%s has no description (kubectl explain shows none); write a doc comment on its Go field", missing)
			}
		})
	}
}

// undescribedFields returns, as "Kind version: path", every property without a
// description in the openAPIV3Schema of each version of the CRD at path.
func undescribedFields(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Names    struct{ Kind string }
			Versions []struct {
				Name   string
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatalf("failed to parse %s: %v", path, err)
	}
	if len(crd.Spec.Versions) == 0 {
		t.Fatalf("%s has no versions", path)
	}
	var missing []string
	for _, v := range crd.Spec.Versions {
		root := v.Schema.OpenAPIV3Schema
		if root == nil {
			t.Fatalf("%s version %s has no openAPIV3Schema", path, v.Name)
		}
		for _, p := range propertiesWithoutDescription(root, "") {
			if p != "metadata" {
				missing = append(missing, crd.Spec.Names.Kind+" "+v.Name+": "+p)
			}
		}
	}
	return missing
}

// propertiesWithoutDescription walks schema's properties, the items of its arrays and
// the values of its maps, and returns the dotted path of every property whose
// description is empty. Array items and map values are not properties of their own: a
// field's description covers them, so only the properties inside them are checked.
func propertiesWithoutDescription(schema map[string]any, path string) []string {
	var out []string
	props, _ := schema["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		prop, _ := props[name].(map[string]any)
		p := name
		if path != "" {
			p = path + "." + name
		}
		if d, _ := prop["description"].(string); strings.TrimSpace(d) == "" {
			out = append(out, p)
		}
		out = append(out, propertiesWithoutDescription(prop, p)...)
	}
	if items, ok := schema["items"].(map[string]any); ok {
		out = append(out, propertiesWithoutDescription(items, path+"[]")...)
	}
	if values, ok := schema["additionalProperties"].(map[string]any); ok {
		out = append(out, propertiesWithoutDescription(values, path+"{}")...)
	}
	return out
}

func TestPropertiesWithoutDescriptionFindsNestedFields(t *testing.T) {
	schema := map[string]any{}
	if err := yaml.Unmarshal([]byte(`
properties:
  metadata: {type: object}
  spec:
    description: spec is described.
    properties:
      disks:
        description: disks are described.
        items:
          properties:
            name: {type: string}
            size: {description: size is described., type: string}
      labels:
        description: labels are described.
        additionalProperties:
          properties:
            value: {type: string}
      paused: {type: boolean}
`), &schema); err != nil {
		t.Fatal(err)
	}
	got := propertiesWithoutDescription(schema, "")
	want := []string{"metadata", "spec.disks[].name", "spec.labels{}.value", "spec.paused"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
