package cli

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
	"github.com/banlieue/banlieue/test/testenv"
)

// adoptOutput is what one run of banlieue adopt printed, decoded.
type adoptOutput struct {
	text     string
	classes  map[string]banlieuev1.VMClass
	machines []banlieuev1.VirtualMachine
}

// decodeAdopt decodes the YAML stream banlieue adopt printed, failing the test on a
// document that is neither a VMClass nor a VirtualMachine.
func decodeAdopt(t *testing.T, text string) adoptOutput {
	t.Helper()
	out := adoptOutput{text: text, classes: map[string]banlieuev1.VMClass{}}
	for _, doc := range strings.Split(text, "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("a document is no YAML object: %v\n%s", err, doc)
		}
		switch meta.Kind {
		case "":
			for _, line := range strings.Split(strings.TrimSpace(doc), "\n") {
				if !strings.HasPrefix(line, "#") {
					t.Fatalf("a document without kind holds more than comments:\n%s", doc)
				}
			}
		case "VMClass":
			var c banlieuev1.VMClass
			if err := yaml.UnmarshalStrict([]byte(doc), &c); err != nil {
				t.Fatalf("VMClass: %v\n%s", err, doc)
			}
			if _, dup := out.classes[c.Name]; dup {
				t.Fatalf("VMClass %s is printed twice", c.Name)
			}
			out.classes[c.Name] = c
		case "VirtualMachine":
			var m banlieuev1.VirtualMachine
			if err := yaml.UnmarshalStrict([]byte(doc), &m); err != nil {
				t.Fatalf("VirtualMachine: %v\n%s", err, doc)
			}
			out.machines = append(out.machines, m)
		default:
			t.Fatalf("unexpected kind %q:\n%s", meta.Kind, doc)
		}
		if meta.Kind != "" && meta.APIVersion != banlieuev1.GroupVersion.String() {
			t.Errorf("%s has apiVersion %q", meta.Kind, meta.APIVersion)
		}
	}
	return out
}

// byProviderID returns the printed VirtualMachines by adoptProviderID, failing the test
// when one ID is adopted twice.
func (o adoptOutput) byProviderID(t *testing.T) map[string]banlieuev1.VirtualMachine {
	t.Helper()
	out := map[string]banlieuev1.VirtualMachine{}
	for _, m := range o.machines {
		if _, dup := out[m.Spec.AdoptProviderID]; dup {
			t.Errorf("%s is adopted twice", m.Spec.AdoptProviderID)
		}
		out[m.Spec.AdoptProviderID] = m
	}
	return out
}

// runAdoptCommand runs banlieue adopt with args, as a person would, and returns what it
// printed.
func runAdoptCommand(kubeconfig string, args ...string) (string, error) {
	cmd := newRootCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append([]string{"adopt", "--kubeconfig", kubeconfig}, args...))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// vmShape is a simulator VM's shape as a VMClass spec would say it.
type vmShape struct {
	cpus     int32
	memory   int64
	diskGiB  []int32
	firmware banlieuev1.Firmware
}

func shapeOfSim(vm mo.VirtualMachine) vmShape {
	s := vmShape{cpus: vm.Config.Hardware.NumCPU, memory: int64(vm.Config.Hardware.MemoryMB), firmware: banlieuev1.Firmware(vm.Config.Firmware)}
	for _, d := range vm.Config.Hardware.Device {
		if disk, ok := d.(*types.VirtualDisk); ok {
			s.diskGiB = append(s.diskGiB, int32((disk.CapacityInBytes+providersdk.GiB-1)/providersdk.GiB))
		}
	}
	return s
}

func shapeOfClass(c banlieuev1.VMClass) vmShape {
	s := vmShape{cpus: c.Spec.Hardware.CPUs, memory: c.Spec.Hardware.MemoryMiB, firmware: c.Spec.Firmware}
	if s.firmware == "" {
		s.firmware = banlieuev1.FirmwareBIOS
	}
	for _, d := range c.Spec.Hardware.Disks {
		s.diskGiB = append(s.diskGiB, d.SizeGiB)
	}
	return s
}

// simTask waits for a govmomi task.
func simTask(t *testing.T, task *object.Task, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestAdoptCommand runs banlieue adopt against a vcsim vCenter and an envtest API
// server, and applies what it prints.
func TestAdoptCommand(t *testing.T) {
	testenv.Assets(t)
	env, err := testenv.Start("config/crd/bases")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	kubeconfig, err := env.Kubeconfig(t.TempDir(), "admin")
	if err != nil {
		t.Fatal(err)
	}
	k8s := env.Client
	ctx := context.Background()

	// The simulator's model VMs get shapes a VMClass can have (vcsim makes them with
	// 32 MiB) and names to sanitise; one moves into a folder, one is marked by another
	// machine, and the template stays.
	sim := vspheretest.Start(t)
	vms, err := sim.VMs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]mo.VirtualMachine{}
	for _, vm := range vms {
		byName[vm.Name] = vm
	}
	vc := sim.Client.Client
	edit := func(name, rename string, spec types.VirtualMachineConfigSpec) {
		vm := object.NewVirtualMachine(vc, byName[name].Self)
		spec.Name = rename
		task, err := vm.Reconfigure(ctx, spec)
		simTask(t, task, err)
	}
	edit("DC0_H0_VM0", "web-01", types.VirtualMachineConfigSpec{NumCPUs: 2, MemoryMB: 2048})
	edit("DC0_H0_VM1", "Web_02.example", types.VirtualMachineConfigSpec{NumCPUs: 2, MemoryMB: 2048})
	edit("DC0_C0_RP0_VM0", "db-01", types.VirtualMachineConfigSpec{NumCPUs: 4, MemoryMB: 8192, Firmware: string(types.GuestOsDescriptorFirmwareTypeEfi)})
	edit("DC0_C0_RP0_VM1", "", types.VirtualMachineConfigSpec{
		ExtraConfig: []types.BaseOptionValue{&types.OptionValue{Key: vsphere.ExtraConfigMachineUID, Value: "0ther000-0000-4000-8000-000000000001"}},
	})
	vmFolder, err := object.NewSearchIndex(vc).FindByInventoryPath(ctx, "/"+vspheretest.Datacenter+"/vm")
	if err != nil || vmFolder == nil {
		t.Fatalf("VM folder: %v", err)
	}
	legacy, err := vmFolder.(*object.Folder).CreateFolder(ctx, "legacy")
	if err != nil {
		t.Fatal(err)
	}
	task, err := legacy.MoveInto(ctx, []types.ManagedObjectReference{byName["DC0_C0_RP0_VM0"].Self})
	simTask(t, task, err)

	// want are the VMs banlieue adopt must print: unmarked, no templates.
	if vms, err = sim.VMs(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string]mo.VirtualMachine{}
	for _, vm := range vms {
		if !vm.Config.Template && vspheretest.ExtraConfig(vm, vsphere.ExtraConfigMachineUID) == "" {
			want["vsphere://"+vm.Config.Uuid] = vm
		}
	}
	if len(want) != 3 {
		t.Fatalf("the simulator has %d unmarked VMs, want 3", len(want))
	}
	idOf := func(name string) string {
		for id, vm := range want {
			if vm.Name == name {
				return id
			}
		}
		t.Fatalf("no VM %s", name)
		return ""
	}

	// The Providers: one enabled and labelled, one disabled without labels, one whose
	// Secret is missing.
	for _, ns := range []string{"infra", "adopted"} {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := k8s.Create(ctx, sim.CredentialsSecret("infra", "vc-credentials")); err != nil {
		t.Fatal(err)
	}
	provider := func(name string, policy banlieuev1.AdoptionPolicy, labels map[string]string, secret string) {
		p := &banlieuev1.Provider{
			ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: name, Labels: labels},
			Spec: banlieuev1.ProviderSpec{
				ProviderClassRef: banlieuev1.LocalObjectReference{Name: vsphere.ProviderClass},
				Connection:       sim.Connection(secret),
				Capabilities: banlieuev1.Capabilities{StorageClasses: []banlieuev1.ClassMapping{
					{Name: "standard", Target: map[string]string{"datastore": vspheretest.Datastore}},
				}},
				AdoptionPolicy: policy,
			},
		}
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	provider("vc", banlieuev1.AdoptionPolicyEnabled, map[string]string{"site": "lab", "backend": "vcenter"}, "vc-credentials")
	provider("vc-disabled", banlieuev1.AdoptionPolicyDisabled, nil, "vc-credentials")
	provider("vc-nosecret", banlieuev1.AdoptionPolicyEnabled, nil, "missing-credentials")
	other := &banlieuev1.Provider{
		ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "other", Labels: map[string]string{"site": "lab", "backend": "vcenter", "more": "x"}},
		Spec: banlieuev1.ProviderSpec{
			ProviderClassRef: banlieuev1.LocalObjectReference{Name: "elsewhere"},
			Connection:       banlieuev1.Connection{Endpoint: "https://pve.example:8006"},
		},
	}
	if err := k8s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}

	// checkComplete checks that out adopts exactly the VMs of wantIDs, each once, in
	// namespace, with the properties an adoption needs and a class of its shape.
	checkComplete := func(t *testing.T, out adoptOutput, namespace string, wantIDs []string, existing map[string]banlieuev1.VMClass) {
		t.Helper()
		got := out.byProviderID(t)
		if len(got) != len(wantIDs) || len(out.machines) != len(wantIDs) {
			t.Errorf("%d VirtualMachines printed, want %d:\n%s", len(out.machines), len(wantIDs), out.text)
		}
		names := map[string]bool{}
		for _, id := range wantIDs {
			m, ok := got[id]
			if !ok {
				t.Errorf("no VirtualMachine adopts %s (%s)", id, want[id].Name)
				continue
			}
			if errs := validation.IsDNS1123Label(m.Name); len(errs) > 0 || names[m.Name] {
				t.Errorf("VirtualMachine name %q: %v (duplicate: %v)", m.Name, errs, names[m.Name])
			}
			names[m.Name] = true
			wantPower := banlieuev1.PowerStatePoweredOn
			if want[id].Runtime.PowerState == types.VirtualMachinePowerStatePoweredOff {
				wantPower = banlieuev1.PowerStatePoweredOff
			}
			s := m.Spec
			if m.Namespace != namespace || s.MigrationPolicy != banlieuev1.MigrationPolicyNever || s.DeletionPolicy != banlieuev1.DeletionPolicyRetain ||
				s.DesiredPowerState != wantPower || s.ImageRef.Name != "" {
				t.Errorf("VirtualMachine %s: namespace %q, spec %+v; want namespace %s, migrationPolicy never, deletionPolicy Retain, power %s, no image",
					m.Name, m.Namespace, s, namespace, wantPower)
			}
			class, ok := out.classes[s.ClassRef.Name]
			if !ok {
				class, ok = existing[s.ClassRef.Name]
			}
			if !ok {
				t.Errorf("VirtualMachine %s's class %q is neither printed nor in the cluster", m.Name, s.ClassRef.Name)
				continue
			}
			if g, w := shapeOfClass(class), shapeOfSim(want[id]); fmt.Sprint(g) != fmt.Sprint(w) {
				t.Errorf("VirtualMachine %s's class %s has shape %+v, the VM %+v", m.Name, class.Name, g, w)
			}
		}
	}

	var first adoptOutput
	t.Run("prints every unmarked VM that is no template, once, with a class of its shape", func(t *testing.T) {
		text, err := runAdoptCommand(kubeconfig, "--provider", "infra/vc", "--namespace", "adopted")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("banlieue adopt --provider infra/vc --namespace adopted:\n%s", text)
		first = decodeAdopt(t, text)
		checkComplete(t, first, "adopted", []string{idOf("web-01"), idOf("Web_02.example"), idOf("db-01")}, nil)
		// Two VMs of one shape share a class.
		if len(first.classes) != 2 {
			t.Errorf("%d VMClasses printed, want 2 (2 CPUs and 4 CPUs)", len(first.classes))
		}
		for name, c := range first.classes {
			if errs := validation.IsDNS1123Label(name); len(errs) > 0 || !strings.HasPrefix(name, "adopted-") {
				t.Errorf("VMClass name %q: %v", name, errs)
			}
			for _, d := range c.Spec.Hardware.Disks {
				if d.StorageClass != "standard" {
					t.Errorf("VMClass %s disk %s storage class %q, want the Provider's standard", name, d.Name, d.StorageClass)
				}
			}
		}
		names := map[string]string{}
		for _, m := range first.machines {
			names[want[m.Spec.AdoptProviderID].Name] = m.Name
			sel := m.Spec.Placement.ProviderSelector
			if sel == nil || fmt.Sprint(sel.MatchLabels) != fmt.Sprint(map[string]string{"site": "lab", "backend": "vcenter"}) {
				t.Errorf("VirtualMachine %s providerSelector %+v, want the Provider's labels", m.Name, sel)
			}
		}
		if names["web-01"] != "web-01" || names["Web_02.example"] != "web-02-example" || names["db-01"] != "db-01" {
			t.Errorf("VirtualMachine names %v", names)
		}
		for _, forbidden := range []string{sim.Password, "password", "WARNING", "Skipped"} {
			if strings.Contains(text, forbidden) {
				t.Errorf("the output contains %q", forbidden)
			}
		}
		for _, w := range []string{
			"deletionPolicy Retain: deleting this VirtualMachine leaves the VM",
			"# The providerSelector below (Provider infra/vc's labels) also selects infra/other",
		} {
			if !strings.Contains(text, w) {
				t.Errorf("the output lacks %q", w)
			}
		}
	})

	t.Run("--name and --location filter", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want []string
		}{
			{[]string{"--name", "web-*"}, []string{"web-01"}},
			{[]string{"--name", "Web_*"}, []string{"Web_02.example"}},
			{[]string{"--name", "*-01"}, []string{"web-01", "db-01"}},
			{[]string{"--location", "/DC0/vm/legacy"}, []string{"db-01"}},
			{[]string{"--location", "/DC0/vm"}, []string{"web-01", "Web_02.example", "db-01"}},
			{[]string{"--location", "/DC1"}, nil},
			{[]string{"--name", "*-01", "--location", "/DC0/vm/legacy"}, []string{"db-01"}},
			{[]string{"--name", "nothing"}, nil},
		} {
			t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
				text, err := runAdoptCommand(kubeconfig, append([]string{"--provider", "infra/vc"}, tc.args...)...)
				if err != nil {
					t.Fatal(err)
				}
				ids := make([]string, 0, len(tc.want))
				for _, name := range tc.want {
					ids = append(ids, idOf(name))
				}
				out := decodeAdopt(t, text)
				checkComplete(t, out, "default", ids, nil)
				if len(tc.want) == 0 && !strings.Contains(text, "# No VM to adopt") {
					t.Errorf("no comment says there is no VM:\n%s", text)
				}
			})
		}
	})

	t.Run("a disabled Provider without labels gets a warning and no providerSelector", func(t *testing.T) {
		text, err := runAdoptCommand(kubeconfig, "--provider", "infra/vc-disabled", "--name", "web-01")
		if err != nil {
			t.Fatal(err)
		}
		out := decodeAdopt(t, text)
		checkComplete(t, out, "default", []string{idOf("web-01")}, nil)
		for _, w := range []string{
			"# WARNING: Provider infra/vc-disabled has adoptionPolicy Disabled: these VirtualMachines stay unscheduled",
			"(Scheduled=False, reason AdoptionNoProvider)",
			"# Provider infra/vc-disabled has no labels",
		} {
			if !strings.Contains(text, w) {
				t.Errorf("the output lacks %q:\n%s", w, text)
			}
		}
		if p := out.machines[0].Spec.Placement; p.ProviderSelector != nil {
			t.Errorf("placement %+v, want none", p)
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--provider", "infra/nope"}, "provider infra/nope does not exist"},
			{[]string{"--provider", "infra/vc-nosecret"}, "secret infra/missing-credentials named by spec.connection.credentialsRef does not exist"},
			{[]string{"--provider", "infra/other"}, `is of class "elsewhere", which is not built into banlieue (libvirt, proxmox, vsphere)`},
			{[]string{"--provider", "vc"}, "is not <namespace>/<name>"},
			{[]string{"--provider", "infra/vc", "--name", "["}, "is not a valid glob"},
			{nil, `required flag(s) "provider" not set`},
		} {
			t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
				text, err := runAdoptCommand(kubeconfig, tc.args...)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("error %v, want one containing %q", err, tc.want)
				}
				if text != "" {
					t.Errorf("printed %q with an error", text)
				}
				if err != nil && strings.Contains(err.Error(), sim.Password) {
					t.Errorf("the error contains the password")
				}
			})
		}
	})

	t.Run("a driver that is no VMLister is refused", func(t *testing.T) {
		var buf bytes.Buffer
		err := runAdopt(ctx, k8s, map[string]providersdk.Driver{vsphere.ProviderClass: providersdk.NopDriver{}},
			adoptOptions{provider: "infra/vc", namespace: "default"}, &buf)
		if err == nil || !strings.Contains(err.Error(), "the vsphere driver cannot list its VMs") || buf.Len() > 0 {
			t.Errorf("error %v, output %q; want the driver refused", err, buf.String())
		}
	})

	t.Run("an existing VMClass of exactly the shape is referenced instead of a new one", func(t *testing.T) {
		class := func(name, storage string, features ...string) *banlieuev1.VMClass {
			return &banlieuev1.VMClass{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: banlieuev1.VMClassSpec{
					Hardware: banlieuev1.Hardware{CPUs: 2, MemoryMiB: 2048, Disks: []banlieuev1.Disk{{Name: "system", SizeGiB: 10, StorageClass: storage}}},
					Features: features,
				},
			}
		}
		existing := map[string]banlieuev1.VMClass{}
		for _, c := range []*banlieuev1.VMClass{
			class("small", "standard"),
			class("a-small-with-a-feature", "standard", "nestedVirtualization"),
			class("a-small-on-gold", "gold"),
			// The name a new class of the 4-CPU shape would take, with another shape.
			{ObjectMeta: metav1.ObjectMeta{Name: shapeNameOf(t, first, idOf("db-01"))}, Spec: banlieuev1.VMClassSpec{Hardware: banlieuev1.Hardware{CPUs: 1, MemoryMiB: 128}}},
		} {
			if err := k8s.Create(ctx, c); err != nil {
				t.Fatal(err)
			}
			existing[c.Name] = *c
		}
		text, err := runAdoptCommand(kubeconfig, "--provider", "infra/vc", "--namespace", "adopted")
		if err != nil {
			t.Fatal(err)
		}
		out := decodeAdopt(t, text)
		checkComplete(t, out, "adopted", []string{idOf("web-01"), idOf("Web_02.example"), idOf("db-01")}, existing)
		for _, m := range out.machines {
			wantClass := "small"
			if m.Spec.AdoptProviderID == idOf("db-01") {
				wantClass = shapeNameOf(t, first, idOf("db-01")) + "-2"
			}
			if m.Spec.ClassRef.Name != wantClass {
				t.Errorf("VirtualMachine %s classRef %q, want %q", m.Name, m.Spec.ClassRef.Name, wantClass)
			}
		}
		if got := slices.Sorted(maps.Keys(out.classes)); len(got) != 1 {
			t.Errorf("printed VMClasses %v, want only the 4-CPU one", got)
		}
	})

	t.Run("the API server accepts what it prints, and a second run skips the VMs adopted", func(t *testing.T) {
		text, err := runAdoptCommand(kubeconfig, "--provider", "infra/vc", "--namespace", "adopted")
		if err != nil {
			t.Fatal(err)
		}
		out := decodeAdopt(t, text)
		for _, c := range out.classes {
			if err := k8s.Create(ctx, &c); err != nil {
				t.Errorf("VMClass %s: %v", c.Name, err)
			}
		}
		for _, m := range out.machines {
			if err := k8s.Create(ctx, &m); err != nil {
				t.Errorf("VirtualMachine %s: %v", m.Name, err)
			}
		}
		// What the API server holds is what was printed, with its defaults.
		for _, m := range out.machines {
			got := &banlieuev1.VirtualMachine{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(&m), got); err != nil {
				t.Fatal(err)
			}
			if got.Spec.AdoptProviderID != m.Spec.AdoptProviderID || got.Spec.DeletionPolicy != banlieuev1.DeletionPolicyRetain {
				t.Errorf("VirtualMachine %s in the cluster: %+v", m.Name, got.Spec)
			}
		}
		text, err = runAdoptCommand(kubeconfig, "--provider", "infra/vc", "--namespace", "adopted")
		if err != nil {
			t.Fatal(err)
		}
		again := decodeAdopt(t, text)
		if len(again.machines) != 0 || len(again.classes) != 0 || strings.Count(text, "adopts it already") != 3 {
			t.Errorf("second run printed %d VirtualMachines and %d VMClasses; want none, and three skipped:\n%s", len(again.machines), len(again.classes), text)
		}
	})
}

// shapeNameOf is the name of the class the VM id got in out.
func shapeNameOf(t *testing.T, out adoptOutput, id string) string {
	t.Helper()
	m, ok := out.byProviderID(t)[id]
	if !ok {
		t.Fatalf("no VirtualMachine adopts %s", id)
	}
	return m.Spec.ClassRef.Name
}

// TestAdoptPlan covers what needs no cluster: the shapes no VMClass can have, names
// that collide, disks that are not whole GiB.
func TestAdoptPlan(t *testing.T) {
	p := &banlieuev1.Provider{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "vc", Labels: map[string]string{"a": "b"}}}
	p.Spec.ProviderClassRef.Name = "vsphere"
	p.Spec.AdoptionPolicy = banlieuev1.AdoptionPolicyEnabled
	vm := func(name string, cpus int32, mem int64, disks ...int64) providersdk.UnmanagedVM {
		return providersdk.UnmanagedVM{
			ProviderID: "vsphere://" + name, Name: name, PowerState: banlieuev1.PowerStatePoweredOn,
			Hardware: providersdk.Hardware{CPUs: cpus, MemoryMiB: mem, DiskBytes: disks},
		}
	}
	for _, tc := range []struct {
		name string
		vms  []providersdk.UnmanagedVM
		// machines and classes are the VirtualMachine names and class refs printed, in order.
		machines, classes []string
		// comments are in the output.
		comments []string
	}{
		{
			name:     "a VM with less memory than a class may have is skipped",
			vms:      []providersdk.UnmanagedVM{vm("tiny", 1, 32), vm("ok", 1, 128)},
			machines: []string{"ok"}, classes: []string{"adopted-1cpu-128mib"},
			comments: []string{"# Skipped tiny (vsphere://tiny): its 32 MiB of memory are outside a VMClass's 128 to 25165824 MiB"},
		},
		{
			name:     "too many CPUs, too many disks, a disk too large or of no size",
			vms:      []providersdk.UnmanagedVM{vm("cpus", 1000, 1024), vm("disks", 1, 1024, make([]int64, 17)...), vm("large", 1, 1024, 70000*providersdk.GiB), vm("zero", 1, 1024, 0)},
			comments: []string{"its 1000 CPUs are outside", "its 17 disks are more than", "its disk 1 of 70000 GiB is larger", "the size of its disk 1 is unknown", "# No VM to adopt"},
		},
		{
			name:     "names that sanitise alike get suffixes",
			vms:      []providersdk.UnmanagedVM{vm("Web.1", 1, 1024), vm("web_1", 1, 1024), vm("---", 1, 1024), vm(strings.Repeat("x", 80), 1, 1024), vm(strings.Repeat("x", 70), 1, 1024)},
			machines: []string{"vm", "web-1", "web-1-2", strings.Repeat("x", 63), strings.Repeat("x", 61) + "-2"},
			classes:  []string{"adopted-1cpu-1024mib", "adopted-1cpu-1024mib", "adopted-1cpu-1024mib", "adopted-1cpu-1024mib", "adopted-1cpu-1024mib"},
		},
		{
			name:     "a disk of part of a GiB is rounded up, with a comment",
			vms:      []providersdk.UnmanagedVM{vm("odd", 2, 2048, 10*providersdk.GiB+1, 512*1024*1024)},
			machines: []string{"odd"}, classes: []string{"adopted-2cpu-2048mib-11-1gib"},
			comments: []string{"Its disk 1 is 10737418241 bytes, not whole GiB: the class's 11 GiB grows it.", "Its disk 2 is 536870912 bytes"},
		},
		{
			name: "firmware is part of the shape",
			vms: []providersdk.UnmanagedVM{
				{ProviderID: "vsphere://a", Name: "a", Hardware: providersdk.Hardware{CPUs: 1, MemoryMiB: 1024}, Firmware: banlieuev1.FirmwareEFISecure},
				{ProviderID: "vsphere://b", Name: "b", Hardware: providersdk.Hardware{CPUs: 1, MemoryMiB: 1024}, Firmware: banlieuev1.FirmwareBIOS},
			},
			machines: []string{"a", "b"}, classes: []string{"adopted-1cpu-1024mib-efi-secure", "adopted-1cpu-1024mib"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			plan := &adoptPlan{opts: adoptOptions{namespace: "default"}, provider: p}
			if err := plan.write(filterVMs(tc.vms, plan.opts), &buf); err != nil {
				t.Fatal(err)
			}
			out := decodeAdopt(t, buf.String())
			machines, classes := make([]string, 0, len(out.machines)), make([]string, 0, len(out.machines))
			for _, m := range out.machines {
				machines = append(machines, m.Name)
				classes = append(classes, m.Spec.ClassRef.Name)
				if _, ok := out.classes[m.Spec.ClassRef.Name]; !ok {
					t.Errorf("class %s of %s is not printed", m.Spec.ClassRef.Name, m.Name)
				}
			}
			slices.Sort(machines)
			want := slices.Clone(tc.machines)
			slices.Sort(want)
			if fmt.Sprint(machines) != fmt.Sprint(want) || len(classes) != len(tc.classes) {
				t.Errorf("machines %v classes %v, want %v %v\n%s", machines, classes, tc.machines, tc.classes, buf.String())
			}
			for _, c := range tc.classes {
				if !slices.Contains(classes, c) {
					t.Errorf("classes %v lack %s", classes, c)
				}
			}
			for _, c := range tc.comments {
				if !strings.Contains(buf.String(), c) {
					t.Errorf("the output lacks %q:\n%s", c, buf.String())
				}
			}
		})
	}
}
