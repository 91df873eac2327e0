package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/wiring"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// adoptOptions are the flags of banlieue adopt.
type adoptOptions struct {
	kubeconfig string
	// provider is the Provider as "<namespace>/<name>".
	provider string
	// name is a path.Match pattern the backend VM names must match; all when empty.
	name string
	// location is a prefix of UnmanagedVM.Location the VMs must have; all when empty.
	location string
	// namespace is the namespace of the printed VirtualMachines.
	namespace string
}

// Limits of a VMClass (api/v1alpha1/vmclass_types.go).
const (
	classMinMemoryMiB = 128
	classMaxMemoryMiB = 25165824
	classMaxCPUs      = 768
	classMaxDisks     = 16
	classMaxDiskGiB   = 65536
)

func newAdoptCommand() *cobra.Command {
	o := adoptOptions{}
	cmd := &cobra.Command{
		Use:   "adopt --provider <namespace>/<name>",
		Short: "Print VirtualMachines (and VMClasses) that adopt a Provider's unmanaged VMs, for kubectl apply",
		Long: `adopt lists the backend VMs of a Provider that no banlieue machine manages and that are not
templates, and prints, for 'kubectl apply -f -', one VirtualMachine per VM that adopts it as it
is (spec.adoptProviderID, its power state, migrationPolicy never, deletionPolicy Retain) and a
VMClass of each VM's shape unless one in the cluster fits exactly. It changes nothing: it only
reads the Provider, its credentials Secret and CA bundle with your kubeconfig, and the backend.
The Provider's adoptionPolicy must be Enabled for the VirtualMachines to be placed.`,
		Example: `  banlieue adopt --provider infra/vcenter --name 'web-*' --namespace team-a > adopt.yaml
  kubectl apply -f adopt.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			cfg, err := restConfig(o.kubeconfig)
			if err != nil {
				return fmt.Errorf("failed to load the kubeconfig: %w", err)
			}
			scheme, err := wiring.Scheme()
			if err != nil {
				return err
			}
			c, err := client.New(cfg, client.Options{Scheme: scheme})
			if err != nil {
				return fmt.Errorf("failed to create a Kubernetes client: %w", err)
			}
			return runAdopt(cmd.Context(), c, adoptDrivers(), o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; in-cluster or $KUBECONFIG when empty")
	f.StringVar(&o.provider, "provider", "", "The Provider whose VMs to adopt, as <namespace>/<name> (required)")
	f.StringVar(&o.name, "name", "", "Only the VMs whose backend name matches this glob, e.g. 'web-*'")
	f.StringVar(&o.location, "location", "", "Only the VMs whose location starts with this (a vSphere folder path such as /DC0/vm/web, a Proxmox VE node or node/pool)")
	f.StringVar(&o.namespace, "namespace", "default", "The namespace of the printed VirtualMachines")
	_ = cmd.MarkFlagRequired("provider")
	return cmd
}

// validate checks the flags before anything is read.
func (o *adoptOptions) validate() error {
	ns, name, ok := strings.Cut(o.provider, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("--provider %q is not <namespace>/<name>", o.provider)
	}
	if _, err := path.Match(o.name, ""); err != nil {
		return fmt.Errorf("--name %q is not a valid glob: %w", o.name, err)
	}
	if errs := validation.IsDNS1123Label(o.namespace); len(errs) > 0 {
		return fmt.Errorf("--namespace %q is not a namespace name: %s", o.namespace, strings.Join(errs, "; "))
	}
	return nil
}

// adoptDrivers are the drivers of the built-in provider classes, by class.
func adoptDrivers() map[string]providersdk.Driver {
	out := map[string]providersdk.Driver{}
	for class, config := range builtinProviders(&providerFlags{}) {
		out[class] = config().Driver
	}
	return out
}

// runAdopt reads the Provider o names with c, lists its unmanaged VMs through the
// driver of its class and writes the VMClasses and VirtualMachines that adopt them to
// out. It writes nothing to the cluster or the backend.
func runAdopt(ctx context.Context, c client.Client, drivers map[string]providersdk.Driver, o adoptOptions, out io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	ns, name, _ := strings.Cut(o.provider, "/")
	p := &banlieuev1.Provider{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("provider %s/%s does not exist", ns, name)
		}
		return fmt.Errorf("failed to read Provider %s/%s: %w", ns, name, err)
	}
	class := p.Spec.ProviderClassRef.Name
	driver, ok := drivers[class]
	if !ok {
		return fmt.Errorf("provider %s/%s is of class %q, which is not built into banlieue (%s); its own tooling has to list its VMs",
			ns, name, class, strings.Join(slices.Sorted(maps.Keys(drivers)), ", "))
	}

	// The SDK's Sessions read the credentials Secret and CA bundle as the provider
	// process does, with the same messages when they are missing.
	sessions := providersdk.NewSessions(driver, c)
	session, err := sessions.Connect(ctx, p)
	if err != nil {
		return fmt.Errorf("failed to connect to Provider %s/%s: %w", ns, name, err)
	}
	defer sessions.Forget(context.WithoutCancel(ctx), p.UID)
	lister, ok := session.(providersdk.VMLister)
	if !ok {
		return fmt.Errorf("the %s driver cannot list its VMs (it is no VMLister), so banlieue adopt cannot serve Provider %s/%s; write the VirtualMachines by hand with spec.adoptProviderID", class, ns, name)
	}
	vms, err := lister.ListVMs(ctx)
	if err != nil {
		return fmt.Errorf("failed to list the VMs of Provider %s/%s: %w", ns, name, err)
	}

	var classes banlieuev1.VMClassList
	if err := c.List(ctx, &classes); err != nil {
		return fmt.Errorf("failed to list the VMClasses: %w", err)
	}
	var machines banlieuev1.VirtualMachineList
	if err := c.List(ctx, &machines); err != nil {
		return fmt.Errorf("failed to list the VirtualMachines: %w", err)
	}
	var providers banlieuev1.ProviderList
	if err := c.List(ctx, &providers); err != nil {
		return fmt.Errorf("failed to list the Providers: %w", err)
	}
	return (&adoptPlan{
		opts: o, provider: p, existingClasses: classes.Items, machines: machines.Items, providers: providers.Items,
	}).write(filterVMs(vms, o), out)
}

// filterVMs keeps the VMs whose name matches o.name and whose location starts with
// o.location, sorted by name and provider ID so that the output is stable.
func filterVMs(vms []providersdk.UnmanagedVM, o adoptOptions) []providersdk.UnmanagedVM {
	var out []providersdk.UnmanagedVM
	for _, vm := range vms {
		if o.name != "" {
			if ok, _ := path.Match(o.name, vm.Name); !ok {
				continue
			}
		}
		if !strings.HasPrefix(vm.Location, o.location) {
			continue
		}
		out = append(out, vm)
	}
	slices.SortStableFunc(out, func(a, b providersdk.UnmanagedVM) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.ProviderID, b.ProviderID)
	})
	return out
}

// adoptPlan is what banlieue adopt prints, and what it was made from.
type adoptPlan struct {
	opts            adoptOptions
	provider        *banlieuev1.Provider
	existingClasses []banlieuev1.VMClass
	machines        []banlieuev1.VirtualMachine
	providers       []banlieuev1.Provider

	// newClasses are the VMClasses to print, by name.
	newClasses map[string]*banlieuev1.VMClass
	// classNames are the names taken by existing and new VMClasses.
	classNames map[string]bool
	// vmNames are the VirtualMachine names taken in the namespace, existing or printed.
	vmNames map[string]bool
}

// document is one YAML document: its comment lines and its object.
type document struct {
	comments []string
	obj      any
}

// write prints the plan for vms to out.
func (a *adoptPlan) write(vms []providersdk.UnmanagedVM, out io.Writer) error {
	p := a.provider
	a.newClasses, a.classNames, a.vmNames = map[string]*banlieuev1.VMClass{}, map[string]bool{}, map[string]bool{}
	for _, c := range a.existingClasses {
		a.classNames[c.Name] = true
	}
	adopting := map[string]string{}
	for _, m := range a.machines {
		if m.Namespace == a.opts.namespace {
			a.vmNames[m.Name] = true
		}
		for _, id := range []string{m.Spec.AdoptProviderID, m.Status.ProviderID} {
			if id != "" {
				adopting[strings.ToLower(id)] = m.Namespace + "/" + m.Name
			}
		}
	}

	header := []string{
		fmt.Sprintf("VirtualMachines adopting the VMs of Provider %s/%s (%s), printed by banlieue adopt.", p.Namespace, p.Name, p.Spec.ProviderClassRef.Name),
		"Review them, then: kubectl apply -f <this file>",
	}
	if p.Spec.AdoptionPolicy != banlieuev1.AdoptionPolicyEnabled {
		policy := string(p.Spec.AdoptionPolicy)
		if policy == "" {
			policy = string(banlieuev1.AdoptionPolicyDisabled)
		}
		header = append(header, "",
			fmt.Sprintf("WARNING: Provider %s/%s has adoptionPolicy %s: these VirtualMachines stay unscheduled", p.Namespace, p.Name, policy),
			"(Scheduled=False, reason AdoptionNoProvider) until an administrator sets its spec.adoptionPolicy to Enabled.")
	}
	selector, selectorNote := a.providerSelector()
	if selectorNote != "" {
		header = append(header, "", selectorNote)
	}

	var vmDocs []document
	for _, vm := range vms {
		if by, ok := adopting[strings.ToLower(vm.ProviderID)]; ok {
			header = append(header, fmt.Sprintf("Skipped %s (%s): VirtualMachine %s adopts it already.", vm.Name, vm.ProviderID, by))
			continue
		}
		spec, notes, problem := classSpec(vm, p)
		if problem != "" {
			header = append(header, fmt.Sprintf("Skipped %s (%s): %s; adopt it by hand with a class of another shape.", vm.Name, vm.ProviderID, problem))
			continue
		}
		className := a.classFor(spec)
		vmDoc := &banlieuev1.VirtualMachine{
			TypeMeta:   metav1.TypeMeta{APIVersion: banlieuev1.GroupVersion.String(), Kind: "VirtualMachine"},
			ObjectMeta: metav1.ObjectMeta{Namespace: a.opts.namespace, Name: a.vmName(vm.Name)},
			Spec: banlieuev1.VirtualMachineSpec{
				ClassRef:          banlieuev1.LocalObjectReference{Name: className},
				AdoptProviderID:   vm.ProviderID,
				DesiredPowerState: vm.PowerState,
				MigrationPolicy:   banlieuev1.MigrationPolicyNever,
				DeletionPolicy:    banlieuev1.DeletionPolicyRetain,
			},
		}
		if selector != nil {
			vmDoc.Spec.Placement.ProviderSelector = selector
		}
		where := vm.Location
		if where == "" {
			where = "-"
		}
		comments := []string{
			fmt.Sprintf("%s %s: %s, %s", vm.Name, vm.ProviderID, where, vm.PowerState),
			"deletionPolicy Retain: deleting this VirtualMachine leaves the VM running as it is (only banlieue's mark is removed),",
			"so undoing a mistaken adoption loses nothing. Set it to Delete once banlieue may destroy the VM with its disks.",
		}
		vmDocs = append(vmDocs, document{comments: append(comments, notes...), obj: vmDoc})
	}
	if len(vmDocs) == 0 {
		header = append(header, "", "No VM to adopt: the Provider's backend has no unmanaged VM (that is no template) matching --name and --location.")
	}

	docs := make([]document, 0, 1+len(a.newClasses)+len(vmDocs))
	docs = append(docs, document{comments: header})
	for _, name := range slices.Sorted(maps.Keys(a.newClasses)) {
		docs = append(docs, document{obj: a.newClasses[name], comments: []string{
			"The shape of the adopted VMs below. Disk sizes are whole GiB, rounded up; storageClass only matters",
			"for disks a later class adds: banlieue neither moves nor changes an adopted VM's disks.",
		}})
	}
	docs = append(docs, vmDocs...)
	return writeDocuments(out, docs)
}

// providerSelector is the placement.providerSelector of the printed VMs, the Provider's
// labels, and a note when it selects no Provider alone.
func (a *adoptPlan) providerSelector() (*banlieuev1.LabelSelector, string) {
	p := a.provider
	if len(p.Labels) == 0 {
		return nil, fmt.Sprintf("Provider %s/%s has no labels, so the VirtualMachines below have no placement.providerSelector:", p.Namespace, p.Name) +
			"\nthey go to whichever Provider with adoptionPolicy Enabled has a providerIDPrefix that starts their adoptProviderID" +
			"\n(vsphere:// for every vSphere Provider). Label the Provider and add a providerSelector if several could take them."
	}
	sel := labels.SelectorFromSet(p.Labels)
	var others []string
	for _, o := range a.providers {
		if (o.Namespace != p.Namespace || o.Name != p.Name) && sel.Matches(labels.Set(o.Labels)) {
			others = append(others, o.Namespace+"/"+o.Name)
		}
	}
	note := ""
	if len(others) > 0 {
		note = fmt.Sprintf("The providerSelector below (Provider %s/%s's labels) also selects %s; narrow it if those could adopt the same IDs.",
			p.Namespace, p.Name, strings.Join(others, ", "))
	}
	return &banlieuev1.LabelSelector{MatchLabels: maps.Clone(p.Labels)}, note
}

// classSpec is the VMClass spec of vm's shape, with comments on the VM where the
// class differs from it, or why no VMClass can have its shape.
func classSpec(vm providersdk.UnmanagedVM, p *banlieuev1.Provider) (banlieuev1.VMClassSpec, []string, string) {
	hw := vm.Hardware
	switch {
	case hw.CPUs < 1 || hw.CPUs > classMaxCPUs:
		return banlieuev1.VMClassSpec{}, nil, fmt.Sprintf("its %d CPUs are outside a VMClass's 1 to %d", hw.CPUs, classMaxCPUs)
	case hw.MemoryMiB < classMinMemoryMiB || hw.MemoryMiB > classMaxMemoryMiB:
		return banlieuev1.VMClassSpec{}, nil, fmt.Sprintf("its %d MiB of memory are outside a VMClass's %d to %d MiB", hw.MemoryMiB, classMinMemoryMiB, classMaxMemoryMiB)
	case len(hw.DiskBytes) > classMaxDisks:
		return banlieuev1.VMClassSpec{}, nil, fmt.Sprintf("its %d disks are more than a VMClass's %d", len(hw.DiskBytes), classMaxDisks)
	}
	storageClass := "default"
	if sc := p.Spec.Capabilities.StorageClasses; len(sc) > 0 {
		storageClass = sc[0].Name
	}
	spec := banlieuev1.VMClassSpec{
		Hardware: banlieuev1.Hardware{CPUs: hw.CPUs, MemoryMiB: hw.MemoryMiB},
		Firmware: vm.Firmware,
	}
	var notes []string
	for i, b := range hw.DiskBytes {
		gib := (b + providersdk.GiB - 1) / providersdk.GiB
		switch {
		case b <= 0:
			return banlieuev1.VMClassSpec{}, nil, fmt.Sprintf("the size of its disk %d is unknown", i+1)
		case gib > classMaxDiskGiB:
			return banlieuev1.VMClassSpec{}, nil, fmt.Sprintf("its disk %d of %d GiB is larger than a VMClass's %d GiB", i+1, gib, classMaxDiskGiB)
		case b%providersdk.GiB != 0:
			notes = append(notes, fmt.Sprintf("Its disk %d is %d bytes, not whole GiB: the class's %d GiB grows it.", i+1, b, gib))
		}
		spec.Hardware.Disks = append(spec.Hardware.Disks, banlieuev1.Disk{Name: diskName(i), SizeGiB: int32(gib), StorageClass: storageClass})
	}
	return spec, notes, ""
}

// diskName names a VMClass's disk i: root, then data1, data2, and so on.
func diskName(i int) string {
	if i == 0 {
		return "root"
	}
	return fmt.Sprintf("data%d", i)
}

// classFor returns the name of an existing VMClass of exactly spec's shape, or of the
// new one it adds to the plan.
func (a *adoptPlan) classFor(spec banlieuev1.VMClassSpec) string {
	var fits []string
	for i := range a.existingClasses {
		if a.fits(&a.existingClasses[i].Spec, &spec) {
			fits = append(fits, a.existingClasses[i].Name)
		}
	}
	if len(fits) > 0 {
		slices.Sort(fits)
		return fits[0]
	}
	for name, c := range a.newClasses {
		if a.fits(&c.Spec, &spec) {
			return name
		}
	}
	base := shapeName(spec)
	name := base
	for i := 2; a.classNames[name]; i++ {
		name = fmt.Sprintf("%s-%d", base, i)
	}
	a.classNames[name] = true
	a.newClasses[name] = &banlieuev1.VMClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: banlieuev1.GroupVersion.String(), Kind: "VMClass"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       spec,
	}
	return name
}

// fits reports whether class has exactly the shape of want: CPUs, memory, firmware
// (bios when unset) and disk sizes, asks for no feature, and, when the Provider
// declares storage classes, names only those.
func (a *adoptPlan) fits(class, want *banlieuev1.VMClassSpec) bool {
	fw := func(f banlieuev1.Firmware) banlieuev1.Firmware {
		if f == "" {
			return banlieuev1.FirmwareBIOS
		}
		return f
	}
	if class.Hardware.CPUs != want.Hardware.CPUs || class.Hardware.MemoryMiB != want.Hardware.MemoryMiB ||
		fw(class.Firmware) != fw(want.Firmware) || len(class.Features) > 0 || len(class.Hardware.Disks) != len(want.Hardware.Disks) {
		return false
	}
	offered := map[string]bool{}
	for _, sc := range a.provider.Spec.Capabilities.StorageClasses {
		offered[sc.Name] = true
	}
	for i, d := range class.Hardware.Disks {
		if d.SizeGiB != want.Hardware.Disks[i].SizeGiB || len(offered) > 0 && !offered[d.StorageClass] {
			return false
		}
	}
	return true
}

// shapeName is the name of a new VMClass of spec's shape, e.g.
// adopted-2cpu-4096mib-20-100gib-efi; a long one ends in a digest of the shape.
func shapeName(spec banlieuev1.VMClassSpec) string {
	name := fmt.Sprintf("adopted-%dcpu-%dmib", spec.Hardware.CPUs, spec.Hardware.MemoryMiB)
	if len(spec.Hardware.Disks) > 0 {
		sizes := make([]string, 0, len(spec.Hardware.Disks))
		for _, d := range spec.Hardware.Disks {
			sizes = append(sizes, fmt.Sprint(d.SizeGiB))
		}
		name += "-" + strings.Join(sizes, "-") + "gib"
	}
	if spec.Firmware != "" && spec.Firmware != banlieuev1.FirmwareBIOS {
		name += "-" + string(spec.Firmware)
	}
	if len(name) > validation.DNS1123LabelMaxLength {
		sum := sha256.Sum256([]byte(name))
		name = fmt.Sprintf("adopted-%dcpu-%dmib-%s", spec.Hardware.CPUs, spec.Hardware.MemoryMiB, hex.EncodeToString(sum[:])[:10])
	}
	return name
}

// vmName makes a VirtualMachine name of a backend VM name: a DNS-1123 label (lowercase
// letters, digits and '-'), unique in the namespace and the output.
func (a *adoptPlan) vmName(backend string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(backend) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	base := strings.Trim(b.String(), "-")
	if base == "" {
		base = "vm"
	}
	name := truncateLabel(base, "")
	for i := 2; a.vmNames[name]; i++ {
		name = truncateLabel(base, fmt.Sprintf("-%d", i))
	}
	a.vmNames[name] = true
	return name
}

// truncateLabel is base, shortened so that base+suffix is at most a DNS label's 63
// characters and ends with no '-', followed by suffix.
func truncateLabel(base, suffix string) string {
	if limit := validation.DNS1123LabelMaxLength - len(suffix); len(base) > limit {
		base = strings.TrimRight(base[:limit], "-")
	}
	return base + suffix
}

// writeDocuments writes docs as a YAML stream: each document's comments as '# ' lines,
// then its object, without the empty metadata.creationTimestamp typed objects carry.
func writeDocuments(out io.Writer, docs []document) error {
	var buf bytes.Buffer
	for i, d := range docs {
		if i > 0 {
			buf.WriteString("---\n")
		}
		for _, c := range d.comments {
			for _, line := range strings.Split(c, "\n") {
				buf.WriteString(strings.TrimRight("# "+line, " ") + "\n")
			}
		}
		if d.obj == nil {
			continue
		}
		data, err := objectYAML(d.obj)
		if err != nil {
			return err
		}
		buf.Write(data)
	}
	_, err := out.Write(buf.Bytes())
	return err
}

// objectYAML is obj as YAML, without metadata.creationTimestamp: null.
func objectYAML(obj any) ([]byte, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	if meta, ok := m["metadata"].(map[string]any); ok {
		if ts, ok := meta["creationTimestamp"]; ok && ts == nil {
			delete(meta, "creationTimestamp")
		}
	}
	out, err := yaml.Marshal(m)
	if err != nil {
		return nil, errors.New("failed to print an object as YAML: " + err.Error())
	}
	return out, nil
}
