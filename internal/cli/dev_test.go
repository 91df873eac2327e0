package cli

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

	"k8s.io/client-go/tools/clientcmd"

	"github.com/banlieue/banlieue/test/testenv"
)

// TestDevServesKubectlAndStopsCleanly runs 'banlieue dev' as a user would: it waits for
// the kubeconfig, applies the examples with the kubectl the project built, sees the VM
// become Ready with an address on the simulated vCenter, deletes it, then stops dev and
// checks the API server is gone.
func TestDevServesKubectlAndStopsCleanly(t *testing.T) {
	assets := testenv.Assets(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := newRootCommand()
	cmd.SetArgs([]string{"dev", "--assets", assets, "--dir", dir, "--crds", filepath.Join("..", "..", "config", "crd", "bases")})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	kubeconfig := filepath.Join(dir, "kubeconfig")
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(kubeconfig); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("banlieue dev exited before it was ready: %v", err)
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
	kubectl("apply", "-f", filepath.Join("..", "..", "examples"))
	jsonpath := func(path string) string {
		return kubectl("get", "vm", "db-prod-01", "-o", "jsonpath="+path)
	}
	var ready, ip string
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end) && (ready != "True" || ip == ""); time.Sleep(500 * time.Millisecond) {
		ready, ip = jsonpath(`{.status.conditions[?(@.type=="Ready")].status}`), jsonpath(`{.status.addresses[0].address}`)
	}
	if ready != "True" || ip == "" {
		t.Fatalf("db-prod-01 did not become Ready with an address on the simulated vCenter: Ready=%q address=%q\n%s", ready, ip, kubectl("get", "vm", "db-prod-01", "-o", "yaml"))
	}
	if got := jsonpath("{.status.scheduled.providerName}/{.status.providerID}"); !strings.HasPrefix(got, "vcenter-dc1/vsphere://") {
		t.Errorf("placement/providerID = %q, want vcenter-dc1/vsphere://…", got)
	}
	kubectl("delete", "vm", "db-prod-01", "--wait=true", "--timeout=2m")

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
	case err := <-done:
		if err != nil {
			t.Fatalf("banlieue dev stopped with %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("banlieue dev did not stop within a minute of its context ending")
	}
	if conn, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		_ = conn.Close()
		t.Fatalf("kube-apiserver still answers on %s after banlieue dev stopped", u.Host)
	}
}
