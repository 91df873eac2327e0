package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// quotedFrom are the files docs/provider-authoring.md quotes its Go from: the compiled
// worked example and the SDK's own interfaces.
var quotedFrom = []string{
	"pkg/providersdk/example_test.go",
	"pkg/providersdk/example_conformance_test.go",
	"pkg/providersdk/client.go",
	"pkg/providersdk/optional.go",
}

// goBlock matches a fenced Go block of a Markdown file.
var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// TestProviderAuthoringQuotesTheCompiledExample fails for each Go block of the
// provider-authoring guide whose declarations do not stand, word for word, in the code
// the guide quotes: a third party copies that code, so it must be the code that
// compiles and passes the conformance kit.
func TestProviderAuthoringQuotesTheCompiledExample(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs/provider-authoring.md"))
	if err != nil {
		t.Fatal(err)
	}
	var sources strings.Builder
	for _, f := range quotedFrom {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		sources.Write(b)
	}
	blocks := goBlock.FindAllStringSubmatch(string(doc), -1)
	if len(blocks) == 0 {
		t.Fatal("the guide has no Go block")
	}
	for _, b := range blocks {
		// Blocks join declarations with a blank line; each must be quoted exactly.
		for _, part := range strings.Split(strings.TrimSpace(b[1]), "\n\n") {
			if !strings.Contains(sources.String(), part) {
				first, _, _ := strings.Cut(part, "\n")
				t.Errorf("the guide quotes code that is not in %s: %q…", strings.Join(quotedFrom, ", "), first)
			}
		}
	}
}
