package devcmd

import (
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/banlieue/banlieue/sim/libvirtd"
	"github.com/banlieue/banlieue/test/testenv"
)

// TestDevServesKubectlAndStopsCleanly runs 'banlieue dev' as a user would: it waits for
// the kubeconfig, applies the examples with the kubectl the project built, and walks the
// README: the VM runs on the simulated vCenter, moves to libvirt (when it can run here),
// then to Proxmox VE by editing one label, and its deletion leaves no machine; then it
// stops dev and checks the API server is gone.
func TestDevServesKubectlAndStopsCleanly(t *testing.T) {
	assets := testenv.Assets(t)
	dir := t.TempDir()
	logControllers(t, filepath.Join(dir, "controllers.log"))
	ctx, cancel := context.WithCancel(context.Background())
	cmd := &cobra.Command{Use: "banlieue", SilenceUsage: true}
	cmd.AddCommand(Commands()...)
	cmd.SetArgs([]string{"dev", "--assets", assets, "--dir", dir, "--crds", filepath.Join("..", "..", "..", "config", "crd", "bases"),
		"--admission", filepath.Join("..", "..", "..", "config", "admission")})
	// exited closes when dev returns, with its error in runErr. A test that fails midway
	// still stops dev and waits for it: its kube-apiserver and etcd would outlive the
	// test binary otherwise.
	exited := make(chan struct{})
	var runErr error
	go func() { runErr = cmd.ExecuteContext(ctx); close(exited) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-exited:
		case <-time.After(time.Minute):
			t.Error("banlieue dev did not stop within a minute of the test's end")
		}
	})

	kubeconfig := filepath.Join(dir, "kubeconfig")
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(kubeconfig); err == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("banlieue dev exited before it was ready: %v", runErr)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("banlieue dev did not write its kubeconfig within a minute")
		}
	}
	kubectl := func(args ...string) string {
		t.Helper()
		c := exec.Command(filepath.Join(assets, "kubectl"), args...)
		c.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	kubectl("apply", "-f", filepath.Join("..", "..", "..", "examples"))
	// vmRunsOn waits until the VM runs on provider, Ready, with an address when withIP.
	vmRunsOn := func(vm, provider, idPrefix string, withIP bool) {
		t.Helper()
		var got string
		for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
			got = kubectl("get", "vm", vm, "-o", "jsonpath="+`{.status.scheduled.providerName} {.status.phase} {.status.conditions[?(@.type=="Ready")].status} {.status.providerID} {.status.addresses[0].address}`)
			f := strings.Fields(got)
			if len(f) >= 4 && f[0] == provider && f[1] == "Running" && f[2] == "True" && strings.HasPrefix(f[3], idPrefix) && (!withIP || len(f) == 5) {
				return
			}
		}
		t.Fatalf("%s does not run on %s (provider phase ready providerID address: %q)\n%s", vm, provider, got, kubectl("get", "vm", vm, "-o", "yaml"))
	}
	runsOn := func(provider, idPrefix string, withIP bool) { vmRunsOn("db-prod-01", provider, idPrefix, withIP) }
	moveTo := func(env string) {
		kubectl("patch", "vm", "db-prod-01", "--type", "merge", "-p", `{"spec":{"placement":{"providerSelector":{"matchLabels":{"env":"`+env+`"}}}}}`)
	}
	// The README's walkthrough: on the simulated vCenter, then libvirt, then Proxmox VE.
	runsOn("vcenter-dc1", "vsphere://", true)
	// web-01 runs there too, made with the user data of its banlieue.io/user-data Secret
	// (its address is db-prod-01's check; it may come a refresh later).
	vmRunsOn("web-01", "vcenter-dc1", "vsphere://", false)
	kubectl("delete", "vm", "web-01", "--wait=true", "--timeout=2m")
	if why := libvirtd.Unavailable(); why == "" {
		moveTo("dev")
		runsOn("kvm-dev", "libvirt://", false) // a guest with no OS reports no address
	} else {
		t.Logf("libvirt left out of the walkthrough: %s", why)
	}
	moveTo("edge")
	runsOn("pve-edge", "proxmox://", true)
	kubectl("delete", "vm", "db-prod-01", "--wait=true", "--timeout=2m")
	if left := kubectl("get", "banlieue-machines", "-A", "-o", "name"); strings.Contains(left, "machine.infrastructure.banlieue.io/") {
		t.Errorf("machines left after the VM was deleted: %s", left)
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-exited:
		if runErr != nil {
			t.Fatalf("banlieue dev stopped with %v", runErr)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("banlieue dev did not stop within a minute of its context ending")
	}
	if conn, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		_ = conn.Close()
		t.Fatalf("kube-apiserver still answers on %s after banlieue dev stopped", u.Host)
	}
}

// logControllers sends the controllers' logs to path, as 'banlieue dev' run from the
// command line would print them, and shows their end when the test fails: a walkthrough
// that times out says little without them.
func logControllers(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(f)))
	t.Cleanup(func() {
		_ = f.Close()
		if !t.Failed() {
			return
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Log(err)
			return
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		t.Logf("the controllers' last %d log lines:\n%s", min(len(lines), 200), strings.Join(lines[max(0, len(lines)-200):], "\n"))
	})
}
