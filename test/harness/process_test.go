package harness_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/banlieue/banlieue/test/harness"
	"github.com/banlieue/banlieue/test/testenv"
)

// TestAControllerProcessIsMeasuredKilledAndStartedAgain runs the real core controller
// against a real API server, kills it with SIGKILL, starts it again, and reads what the
// kernel counted across both lives.
func TestAControllerProcessIsMeasuredKilledAndStartedAgain(t *testing.T) {
	testenv.Assets(t)
	env, err := testenv.Start("config/crd/bases")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	dir := t.TempDir()
	bin, err := harness.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := env.Kubeconfig(dir, "banlieue-core")
	if err != nil {
		t.Fatal(err)
	}
	p := harness.StartForTest(t, 10*time.Second, bin, dir, "core", "controller", "--kubeconfig", kubeconfig)

	scrape := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for {
			families, err := p.Metrics(ctx)
			if err == nil && families["controller_runtime_reconcile_total"] != nil {
				return
			}
			select {
			case <-ctx.Done():
				log, _ := os.ReadFile(dir + "/core.log")
				t.Fatalf("the controller never served its metrics: %v\n%s", err, log)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	scrape()
	first, err := p.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if first.PeakRSS == 0 || first.CPU == 0 {
		t.Errorf("usage of a running controller = %+v, want some memory and CPU time", first)
	}

	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if p.Running() {
		t.Fatal("the controller is still running after SIGKILL")
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	scrape()
	second, err := p.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if second.CPU <= first.CPU {
		t.Errorf("CPU time went from %v to %v across a restart; it must add up both lives", first.CPU, second.CPU)
	}
	if p.Restarts() != 1 {
		t.Errorf("Restarts = %d, want 1", p.Restarts())
	}
}
