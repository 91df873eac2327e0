package install

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/banlieue/banlieue/test/testenv"
)

// TestTheDockerfileBuildsAStaticBinaryForADistrolessImage runs the Dockerfile's build
// step exactly as written, without a container runtime (none is available where the
// suite runs), and checks what the distroless runtime stage relies on: a static binary
// with no dynamic loader, built by the Go release go.mod names, run as non-root.
func TestTheDockerfileBuildsAStaticBinaryForADistrolessImage(t *testing.T) {
	lines := dockerfile(t)
	gomod, err := os.ReadFile(testenv.RepoPath("go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var goVersion string // major.minor of go.mod's go line
	for l := range strings.Lines(string(gomod)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "go "); ok {
			goVersion = strings.Join(strings.SplitN(v, ".", 3)[:2], ".")
		}
	}

	var env []string
	var build string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "FROM golang:"):
			if got := strings.Fields(strings.TrimPrefix(l, "FROM golang:"))[0]; got != goVersion {
				t.Errorf("the build stage uses Go %s, go.mod says %s", got, goVersion)
			}
		case strings.HasPrefix(l, "ENV "):
			env = append(env, strings.Fields(strings.TrimPrefix(l, "ENV "))...)
		case strings.HasPrefix(l, "RUN ") && strings.Contains(l, "go build"):
			build = strings.TrimPrefix(l, "RUN ")
		}
	}
	for _, want := range []string{"USER 65532:65532", `ENTRYPOINT ["/banlieue"]`, "COPY --from=build /out/banlieue /banlieue"} {
		if !slices.Contains(lines, want) {
			t.Errorf("the Dockerfile has no %q", want)
		}
	}
	if build == "" {
		t.Fatal("the Dockerfile has no RUN ... go build step")
	}

	out := t.TempDir()
	cmd := exec.Command("sh", "-c", strings.ReplaceAll(build, "/out/", out+"/"))
	cmd.Dir = testenv.RepoPath(".")
	// -mod=readonly from the Dockerfile's ENV needs no change; the image's build args
	// are this machine's platform.
	cmd.Env = append(append(os.Environ(), env...), "TARGETOS="+runtime.GOOS, "TARGETARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the Dockerfile's build step failed: %v\n%s", err, b)
	}

	f, err := elf.Open(filepath.Join(out, "banlieue"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary asks for a dynamic loader; distroless/static has none")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary links %v (%v); it must be static", libs, err)
	}

	// The production binary carries no simulator: no dev or sim command, and none of
	// the development build's packages.
	help, err := exec.Command(filepath.Join(out, "banlieue"), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("banlieue --help: %v\n%s", err, help)
	}
	for l := range strings.Lines(string(help)) {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == "dev" || f[0] == "sim") {
			t.Errorf("the image's binary has the development command %q", f[0])
		}
	}
	deps := exec.Command("go", "list", "-deps", "./cmd/banlieue")
	deps.Dir, deps.Env = testenv.RepoPath("."), cmd.Env
	list, err := deps.Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/banlieue: %v", err)
	}
	for pkg := range strings.Lines(string(list)) {
		pkg = strings.TrimSpace(pkg)
		if slices.Contains(developmentOnly, pkg) || strings.HasPrefix(pkg, "github.com/banlieue/banlieue/sim/") {
			t.Errorf("the image's binary links %s, which only the development build (-tags dev) needs", pkg)
		}
	}
}

// developmentOnly are packages of the development build that the production binary
// must not link: the simulators and the local control plane.
var developmentOnly = []string{
	"github.com/vmware/govmomi/simulator",
	"sigs.k8s.io/controller-runtime/pkg/envtest",
	"github.com/banlieue/banlieue/internal/devenv",
	"github.com/banlieue/banlieue/internal/cli/devcmd",
}

// TestTheDevelopmentBuildHasDevAndSim builds cmd/banlieue as make build does (-tags dev)
// and checks it has the commands the README's walkthrough uses.
func TestTheDevelopmentBuildHasDevAndSim(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "banlieue")
	build := exec.Command("go", "build", "-tags", "dev", "-o", bin, "./cmd/banlieue")
	build.Dir = testenv.RepoPath(".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags dev: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"dev", "--help"}, {"sim", "vsphere", "--help"}, {"sim", "proxmox", "--help"}} {
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Errorf("banlieue %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestTheBuildContextLeavesOutWhatTheImageDoesNotNeed keeps .git and local binaries out
// of 'COPY . .'.
func TestTheBuildContextLeavesOutWhatTheImageDoesNotNeed(t *testing.T) {
	b, err := os.ReadFile(testenv.RepoPath(".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for _, want := range []string{".git", "bin"} {
		if !slices.Contains(lines, want) {
			t.Errorf(".dockerignore does not leave out %s", want)
		}
	}
}

// dockerfile returns the Dockerfile's instructions, one per line, without comments and
// with continuation lines joined.
func dockerfile(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(testenv.RepoPath("Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var lines []string
	var cur string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(l, `\`); ok {
			cur += s + " "
			continue
		}
		lines = append(lines, cur+l)
		cur = ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}
