package proxmox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
)

func TestFailedCloneIsTaskFailedThenRetried(t *testing.T) {
	sim := proxmoxtest.Start(t)
	s := connect(t, sim, newDriver(sim))
	m := newMachine("7c1d2e3f-0000-4000-8000-000000000001")
	sim.FailNextTask("qmclone", "storage 'local-lvm' is full")

	res, err := s.Create(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	_, err = settle(t, s, m, res.Task)
	if msg := wantErr(func(err error) bool {
		var tf *providersdk.TaskFailedError
		return errors.As(err, &tf) && tf.Task.Ref == res.Task.Ref
	}, "clone failed: storage 'local-lvm' is full", "")(err); msg != "" {
		t.Fatal(msg)
	}
	converge(t, s, m)
	theVM(t, sim)
}

func TestCrashMidCloneAdoptsTheClone(t *testing.T) {
	sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
		o.TaskDelays = map[string]time.Duration{"qmclone": 500 * time.Millisecond}
	})
	m := newMachine("8d2e3f40-0000-4000-8000-000000000002")
	first := connect(t, sim, newDriver(sim))
	if _, err := first.Create(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	// The provider dies before it records the task: a new session sees only the machine.
	second := connect(t, sim, newDriver(sim))
	o, err := second.Observe(context.Background(), m)
	if err != nil || o.Exists {
		t.Fatalf("Observe mid-clone without the task = %+v, %v; want no VM yet", o, err)
	}
	res, err := second.Create(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Task.InFlight() {
		t.Fatal("Create during the first clone started nothing and waits for nothing")
	}
	converge(t, second, m)
	theVM(t, sim)
	clones := 0
	for _, task := range sim.Tasks() {
		if task.Type == "qmclone" {
			clones++
		}
	}
	if clones != 1 {
		t.Errorf("%d clone tasks, want 1", clones)
	}
}

func TestConcurrentCreatesGetDistinctVMIDs(t *testing.T) {
	sim := proxmoxtest.Start(t)
	s := connect(t, sim, newDriver(sim))
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := newMachine(fmt.Sprintf("9e3f4051-0000-4000-8000-%012d", i))
			m.Name = fmt.Sprintf("web-%d", i)
			if _, err := reconcile(t, s, m); err != nil {
				t.Errorf("machine %s: %v", m.Name, err)
			}
		}()
	}
	wg.Wait()
	seen := map[int]bool{}
	names := map[string]bool{}
	for _, vm := range sim.VMs() {
		if vm.Template {
			continue
		}
		seen[vm.VMID] = true
		names[vm.Name] = true
	}
	if len(seen) != 20 || len(names) != 20 {
		t.Errorf("%d VMIDs and %d names for 20 machines, want 20 of each", len(seen), len(names))
	}
}
