package placement

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// ProviderTopologyKey is the anti-affinity topology key whose value is the Provider itself.
const ProviderTopologyKey = "provider"

// efiSecureBootFeature is the feature a Provider must declare to run efi-secure VMs.
const efiSecureBootFeature = "efiSecureBoot"

// maxRejectionsInMessage bounds the no-candidate message; the rest are counted.
const maxRejectionsInMessage = 32

// Location is a Provider's failure domain. A Provider that reports no failure domains
// has one, with an empty name.
type Location struct {
	ProviderNamespace string
	ProviderName      string
	FailureDomain     string
}

// ProviderKey is the Provider's namespace/name.
func (l Location) ProviderKey() string { return l.ProviderNamespace + "/" + l.ProviderName }

// Term is one anti-affinity term with the locations of the VMs it selects, the VM
// being placed left out.
type Term struct {
	TopologyKey string
	Required    bool
	Peers       []Location
}

// Request is everything about one VM that placement needs.
type Request struct {
	// Namespace and NamespaceLabels are the VM's namespace, for Providers' namespaceSelector.
	Namespace       string
	NamespaceLabels labels.Set
	Class           *banlieuev1.VMClass
	Image           *banlieuev1.VMImage
	// ProviderSelector and FailureDomainSelector are nil to select everything.
	ProviderSelector      labels.Selector
	FailureDomainSelector labels.Selector
	AntiAffinity          []Term
	// Current is the VM's placement in force, if any; it is kept while it is still valid.
	Current *Location
	// AdoptProviderID is the backend VM the VM adopts, if any: it can run only on the
	// Provider that owns that VM, whatever its image, classes or anti-affinity (Adopt).
	AdoptProviderID string
}

// Decision is a chosen placement.
type Decision struct {
	Location
	Provider *banlieuev1.Provider
}

// Rejection says why a Provider cannot take the VM.
type Rejection struct {
	Provider string
	Reason   string
	// NotAdmitted is set when the Provider's namespaceSelector does not admit the VM's
	// namespace (or cannot be parsed): Message counts such a Provider and never names
	// it, as the VM's tenant has no business knowing it.
	NotAdmitted bool
}

// LoadFunc returns how many VMs are placed in a location.
type LoadFunc func(Location) int

// Scheduler places VMs over a fixed set of Providers. Build one per decision, or reuse
// it while the Providers do not change.
type Scheduler struct {
	// providers are sorted by namespace, then name, so ties go to name order.
	providers []*banlieuev1.Provider
	entries   []providerEntry
	byKey     map[providerKey]int
	// domains are every Provider's failure domains, Provider by Provider and, within
	// one Provider, by name; index maps a location to its place in domains.
	domains []domainEntry
	index   map[Location]int
}

type providerKey struct{ namespace, name string }

// providerEntry is a Provider with what NewScheduler precomputes about it.
type providerEntry struct {
	p *banlieuev1.Provider
	// nsSelector is the parsed namespaceSelector, every namespace when unset; nsSelectorErr is why
	// it could not be parsed.
	nsSelector    labels.Selector
	nsSelectorErr error
	// domains are the indexes into Scheduler.domains of the Provider's failure domains.
	domains []int
}

// domainEntry is one failure domain with its effective labels (the Provider's, then the
// failure domain's), for selectors and anti-affinity topology values.
type domainEntry struct {
	loc    Location
	fd     *banlieuev1.FailureDomain
	labels labels.Set
}

// NewScheduler returns a Scheduler over providers. It neither keeps nor changes the
// slice; it reads the Providers and must not outlive changes to them.
func NewScheduler(providers []*banlieuev1.Provider) *Scheduler {
	s := &Scheduler{
		providers: slices.Clone(providers),
		byKey:     make(map[providerKey]int, len(providers)),
		index:     map[Location]int{},
	}
	slices.SortStableFunc(s.providers, func(a, b *banlieuev1.Provider) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	// A Provider given twice is one Provider.
	s.providers = slices.CompactFunc(s.providers, func(a, b *banlieuev1.Provider) bool {
		return a.Namespace == b.Namespace && a.Name == b.Name
	})
	s.entries = make([]providerEntry, len(s.providers))
	for i, p := range s.providers {
		e := &s.entries[i]
		e.p = p
		e.nsSelector, e.nsSelectorErr = p.Namespaces()
		s.byKey[providerKey{p.Namespace, p.Name}] = i
		fds := failureDomains(p)
		order := make([]int, len(fds))
		for k := range order {
			order[k] = k
		}
		// Name order, so that equally good failure domains are chosen deterministically
		// whatever order the provider controller reports them in.
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(fds[a].Name, fds[b].Name) })
		for _, k := range order {
			fd := &fds[k]
			loc := Location{p.Namespace, p.Name, fd.Name}
			if _, dup := s.index[loc]; dup {
				continue
			}
			set := labels.Merge(labels.Set(p.Labels), labels.Set(fd.Labels))
			set[ProviderTopologyKey] = p.Namespace + "/" + p.Name
			s.index[loc] = len(s.domains)
			e.domains = append(e.domains, len(s.domains))
			s.domains = append(s.domains, domainEntry{loc: loc, fd: fd, labels: set})
		}
	}
	return s
}

// failureDomains returns a Provider's failure domains, or one unnamed domain.
func failureDomains(p *banlieuev1.Provider) []banlieuev1.FailureDomain {
	if len(p.Status.FailureDomains) == 0 {
		return []banlieuev1.FailureDomain{{}}
	}
	return p.Status.FailureDomains
}

// prepared is what one decision computes once from its Request.
type prepared struct {
	req      *Request
	features []string
	rows     map[providerKey]*banlieuev1.ImageProviderStatus
	// held[t][d] says whether a peer of anti-affinity term t holds domain d's value of
	// the term's topology key.
	held [][]bool
}

// prepare computes what every Provider and failure domain is checked against: the
// class's features, the image's rows by Provider, and which domains each anti-affinity
// term's peers hold. It is the only part of a decision that grows with the peers.
func (s *Scheduler) prepare(req *Request) *prepared {
	pr := &prepared{req: req, features: requiredFeatures(req.Class)}
	pr.rows = make(map[providerKey]*banlieuev1.ImageProviderStatus, len(req.Image.Status.PerProvider))
	for k := range req.Image.Status.PerProvider {
		r := &req.Image.Status.PerProvider[k]
		key := providerKey{r.ProviderNamespace, r.ProviderName}
		if _, dup := pr.rows[key]; !dup {
			pr.rows[key] = r
		}
	}
	pr.held = make([][]bool, len(req.AntiAffinity))
	if len(req.AntiAffinity) == 0 {
		return pr
	}
	flat := make([]bool, len(req.AntiAffinity)*len(s.domains))
	for i, t := range req.AntiAffinity {
		ids, byValue := s.valueIDs(t.TopologyKey)
		heldValue := make([]bool, len(byValue))
		// Once every value is held, the remaining peers cannot change anything.
		remaining := len(byValue)
		for k := 0; k < len(t.Peers) && remaining > 0; k++ {
			peer := t.Peers[k]
			id := -1
			if d, ok := s.index[peer]; ok {
				id = ids[d]
			} else if t.TopologyKey == ProviderTopologyKey {
				// A peer in a failure domain its Provider no longer reports is still
				// on that Provider.
				if v, ok := byValue[peer.ProviderKey()]; ok {
					id = v
				}
			}
			if id >= 0 && !heldValue[id] {
				heldValue[id] = true
				remaining--
			}
		}
		held := flat[i*len(s.domains) : (i+1)*len(s.domains)]
		for d, id := range ids {
			held[d] = id >= 0 && heldValue[id]
		}
		pr.held[i] = held
	}
	return pr
}

// valueIDs numbers the values of a topology key: ids[d] is the number of domain d's
// value, or -1 when it has no such label, and byValue maps each value to its number.
func (s *Scheduler) valueIDs(key string) (ids []int, byValue map[string]int) {
	ids = make([]int, len(s.domains))
	byValue = map[string]int{}
	for d := range s.domains {
		v, ok := s.domains[d].labels[key]
		if !ok {
			ids[d] = -1
			continue
		}
		id, ok := byValue[v]
		if !ok {
			id = len(byValue)
			byValue[v] = id
		}
		ids[d] = id
	}
	return ids, byValue
}

// Schedule returns the placement for req, keeping req.Current while it is valid, or nil
// and the reason every Provider was rejected.
func (s *Scheduler) Schedule(req *Request, load LoadFunc) (*Decision, []Rejection) {
	pr := s.prepare(req)
	if req.Current != nil {
		if d, _ := s.validate(pr, *req.Current); d != nil {
			return d, nil
		}
	}
	best, bestPenalty, bestLoad := -1, 0, 0
	for i := range s.entries {
		e := &s.entries[i]
		if s.rejectProvider(pr, e, false) != "" {
			continue
		}
		for _, d := range e.domains {
			penalty, v := s.scoreDomain(pr, d)
			if v.kind != domainOK {
				continue
			}
			l := load(s.domains[d].loc)
			if best < 0 || penalty < bestPenalty || (penalty == bestPenalty && l < bestLoad) {
				best, bestPenalty, bestLoad = d, penalty, l
			}
		}
	}
	if best >= 0 {
		loc := s.domains[best].loc
		return &Decision{Location: loc, Provider: s.providers[s.byKey[providerKey{loc.ProviderNamespace, loc.ProviderName}]]}, nil
	}
	// No candidate: explain every Provider, in order. Only this path formats reasons.
	var rejections []Rejection
	for i := range s.entries {
		e := &s.entries[i]
		key := e.p.Namespace + "/" + e.p.Name
		if why := e.notAdmitted(req); why != "" {
			rejections = append(rejections, Rejection{Provider: key, Reason: why, NotAdmitted: true})
			continue
		}
		why := s.rejectProvider(pr, e, false)
		if why == "" {
			reasons := make([]string, 0, len(e.domains))
			for _, d := range e.domains {
				_, v := s.scoreDomain(pr, d)
				reasons = append(reasons, domainName(s.domains[d].fd)+": "+v.String())
			}
			why = strings.Join(reasons, "; ")
		}
		rejections = append(rejections, Rejection{Provider: key, Reason: why})
	}
	return nil, rejections
}

// Validate says whether loc still satisfies req; it returns the decision for loc, or nil
// and the reason it does not. Preferred anti-affinity does not make a location invalid.
func (s *Scheduler) Validate(req *Request, loc Location) (*Decision, string) {
	return s.validate(s.prepare(req), loc)
}

func (s *Scheduler) validate(pr *prepared, loc Location) (*Decision, string) {
	i, ok := s.byKey[providerKey{loc.ProviderNamespace, loc.ProviderName}]
	if !ok {
		return nil, fmt.Sprintf("Provider %s no longer exists", loc.ProviderKey())
	}
	e := &s.entries[i]
	if why := s.rejectProvider(pr, e, true); why != "" {
		return nil, fmt.Sprintf("Provider %s: %s", loc.ProviderKey(), why)
	}
	if pr.req.AdoptProviderID != "" {
		// An adopted VM is where it is: no failure domain of the Provider is its choice.
		return &Decision{Location: loc, Provider: e.p}, ""
	}
	d, ok := s.index[loc]
	if !ok {
		return nil, fmt.Sprintf("Provider %s no longer has failure domain %s", loc.ProviderKey(), loc.FailureDomain)
	}
	if _, v := s.scoreDomain(pr, d); v.kind != domainOK {
		return nil, fmt.Sprintf("Provider %s failure domain %s: %s", loc.ProviderKey(), domainName(s.domains[d].fd), v)
	}
	return &Decision{Location: loc, Provider: e.p}, ""
}

// Adopt chooses the Provider for a VM that adopts the backend VM req.AdoptProviderID:
// the one Provider that owns it (its status.providerIDPrefix starts the ID) and lets
// VMs adopt (adoptionPolicy Enabled), passing the checks every placement makes but the
// image's, the classes' and anti-affinity's, for the VM is where it is already. The
// decision names no failure domain. It returns nil with every Provider's rejection when
// none qualifies, and nil with the qualifying Providers' keys when several do: one ID
// can name VMs of several Providers (a BIOS UUID on two vCenters), and guessing would
// seize the wrong one.
func (s *Scheduler) Adopt(req *Request) (d *Decision, rejections []Rejection, ambiguous []string) {
	pr := s.prepare(req)
	var chosen *providerEntry
	for i := range s.entries {
		e := &s.entries[i]
		key := e.p.Namespace + "/" + e.p.Name
		if why := e.notAdmitted(req); why != "" {
			rejections = append(rejections, Rejection{Provider: key, Reason: why, NotAdmitted: true})
			continue
		}
		if why := s.rejectProvider(pr, e, false); why != "" {
			rejections = append(rejections, Rejection{Provider: key, Reason: why})
			continue
		}
		chosen = e
		ambiguous = append(ambiguous, key)
	}
	switch len(ambiguous) {
	case 0:
		return nil, rejections, nil
	case 1:
		return &Decision{Location: Location{ProviderNamespace: chosen.p.Namespace, ProviderName: chosen.p.Name}, Provider: chosen.p}, nil, nil
	}
	return nil, nil, ambiguous
}

// adoptionMisfit returns why Provider p cannot adopt the backend VM id, or "". A VM
// adopted already (placed) stays whatever the Provider's adoptionPolicy says now:
// the policy governs new adoptions only.
func adoptionMisfit(p *banlieuev1.Provider, id string, placed bool) string {
	prefix := p.Status.ProviderIDPrefix
	switch {
	case prefix == "":
		return "its provider cannot adopt VMs (status.providerIDPrefix is empty)"
	case !strings.HasPrefix(id, prefix):
		return fmt.Sprintf("its VMs' provider IDs start with %s", prefix)
	case !placed && p.Spec.AdoptionPolicy != banlieuev1.AdoptionPolicyEnabled:
		return "its adoptionPolicy is not Enabled"
	}
	return ""
}

// FitsClass returns why loc cannot run class, judged by the class alone: the storage
// classes, network classes and features its Provider declares and its failure domain
// reports available, as Validate judges them. It returns "" when loc can, and when loc
// names a Provider or failure domain that no longer exists: Validate says that. It is
// how a resize is checked where a VM runs, without regard to what else could move it.
func (s *Scheduler) FitsClass(class *banlieuev1.VMClass, loc Location) string {
	i, ok := s.byKey[providerKey{loc.ProviderNamespace, loc.ProviderName}]
	if !ok {
		return ""
	}
	features := requiredFeatures(class)
	if why := classMisfit(s.entries[i].p, class, features); why != "" {
		return fmt.Sprintf("Provider %s: %s", loc.ProviderKey(), why)
	}
	d, ok := s.index[loc]
	if !ok {
		return ""
	}
	if v := domainClassVerdict(s.domains[d].fd, class, features); v.kind != domainOK {
		return fmt.Sprintf("Provider %s failure domain %s: %s", loc.ProviderKey(), domainName(s.domains[d].fd), v)
	}
	return ""
}

// notAdmitted returns why the Provider's namespaceSelector does not admit the VM's
// namespace, or "" when it does; a nil selector admits every namespace.
func (e *providerEntry) notAdmitted(req *Request) string {
	switch {
	case e.nsSelectorErr != nil:
		return fmt.Sprintf("its namespaceSelector is invalid: %v", e.nsSelectorErr)
	case !e.nsSelector.Matches(req.NamespaceLabels):
		return fmt.Sprintf("its namespaceSelector does not admit namespace %q", req.Namespace)
	}
	return ""
}

// rejectProvider returns why the Provider as a whole cannot take the VM, or "". The
// namespaceSelector comes first, so that a Provider not admitting the VM's namespace
// is rejected for that alone and nothing else of it is looked at. For a
// VM already placed there (placed), only what the user or the admin declared counts: a
// Provider that is paused, unclaimed, not Ready or whose image row is not ready keeps
// its VMs, since moving a VM deletes its machine and a backend outage is not a reason.
// A Provider being deleted is the admin's word: its VMs move (or, with migrationPolicy
// never, hold its deletion until they are deleted).
func (s *Scheduler) rejectProvider(pr *prepared, e *providerEntry, placed bool) string {
	req, p := pr.req, e.p
	if why := e.notAdmitted(req); why != "" {
		return why
	}
	switch {
	case req.ProviderSelector != nil && !req.ProviderSelector.Matches(labels.Set(p.Labels)):
		return "not selected by placement.providerSelector"
	case !p.DeletionTimestamp.IsZero():
		return "being deleted"
	case placed:
	case ptr.Deref(p.Spec.Paused, false):
		return "paused"
	case !p.Status.MachineKind.IsDefined():
		return fmt.Sprintf("no provider controller for class %q has claimed it (status.machineKind is empty)", p.Spec.ProviderClassRef.Name)
	case !apimeta.IsStatusConditionTrue(p.Status.Conditions, banlieuev1.ReadyCondition):
		return "not Ready" + conditionDetail(p, apimeta.FindStatusCondition(p.Status.Conditions, banlieuev1.ReadyCondition))
	}
	if req.AdoptProviderID != "" {
		return adoptionMisfit(p, req.AdoptProviderID, placed)
	}
	class := p.Spec.ProviderClassRef.Name
	src := req.Image.SourceFor(class)
	if src == nil {
		return fmt.Sprintf("image %s has no source for provider class %q", req.Image.Name, class)
	}
	// An image that stops being ready does not move the VMs already made from it.
	switch row := pr.rows[providerKey{p.Namespace, p.Name}]; {
	case placed:
	case row != nil && !ptr.Deref(row.Ready, false):
		return fmt.Sprintf("image %s is not ready here: %s", req.Image.Name, Sanitize(p, cmp.Or(row.Message, row.Reason, "no reason given")))
	case row == nil && src.Kind == banlieuev1.ImageSourceURL:
		return fmt.Sprintf("image %s has not been imported here yet", req.Image.Name)
	}
	return classMisfit(p, req.Class, pr.features)
}

// classMisfit returns why the Provider's capabilities cannot run the class, whose
// required features are features, or "".
func classMisfit(p *banlieuev1.Provider, class *banlieuev1.VMClass, features []string) string {
	for _, d := range class.Spec.Hardware.Disks {
		if p.StorageClass(d.StorageClass) == nil {
			return fmt.Sprintf("storage class %q (disk %s) is not in its capabilities", d.StorageClass, d.Name)
		}
	}
	for _, i := range class.Spec.Network.Interfaces {
		if p.NetworkClass(i.NetworkClass) == nil {
			return fmt.Sprintf("network class %q (interface %s) is not in its capabilities", i.NetworkClass, i.Name)
		}
	}
	for _, f := range features {
		if !slices.Contains(p.Spec.Capabilities.Features, f) {
			return fmt.Sprintf("feature %q is not in its capabilities", f)
		}
	}
	return ""
}

// domainVerdictKind is why a failure domain cannot take the VM.
type domainVerdictKind int

const (
	domainOK domainVerdictKind = iota
	domainNotSelected
	domainNoStorageClass
	domainNoNetworkClass
	domainNoFeature
	domainAntiAffinity
)

// domainVerdict is a failure domain's verdict, formatted only when it is shown.
type domainVerdict struct {
	kind domainVerdictKind
	// name is the storage class, network class or feature missing, or the topology key
	// whose value is held.
	name  string
	value string
}

func (v domainVerdict) String() string {
	switch v.kind {
	case domainNotSelected:
		return "not selected by placement.failureDomainSelector"
	case domainNoStorageClass:
		return fmt.Sprintf("storage class %q is not available", v.name)
	case domainNoNetworkClass:
		return fmt.Sprintf("network class %q is not available", v.name)
	case domainNoFeature:
		return fmt.Sprintf("feature %q is not available", v.name)
	case domainAntiAffinity:
		return fmt.Sprintf("required anti-affinity on %s=%s is violated", v.name, v.value)
	}
	return ""
}

// scoreDomain returns why a failure domain cannot take the VM, or how many preferred
// anti-affinity terms it breaks.
func (s *Scheduler) scoreDomain(pr *prepared, d int) (int, domainVerdict) {
	req, dom := pr.req, &s.domains[d]
	if req.FailureDomainSelector != nil && !req.FailureDomainSelector.Matches(dom.labels) {
		return 0, domainVerdict{kind: domainNotSelected}
	}
	if v := domainClassVerdict(dom.fd, req.Class, pr.features); v.kind != domainOK {
		return 0, v
	}
	penalty := 0
	for i, t := range req.AntiAffinity {
		if !pr.held[i][d] {
			continue
		}
		if t.Required {
			return 0, domainVerdict{kind: domainAntiAffinity, name: t.TopologyKey, value: dom.labels[t.TopologyKey]}
		}
		penalty++
	}
	return penalty, domainVerdict{}
}

// domainClassVerdict returns why the failure domain fd cannot run the class, whose
// required features are features: a storage class, network class or feature it
// reports unavailable.
func domainClassVerdict(fd *banlieuev1.FailureDomain, class *banlieuev1.VMClass, features []string) domainVerdict {
	attrs := &fd.Attributes
	for _, disk := range class.Spec.Hardware.Disks {
		if attrs.AvailableStorageClasses != nil && !slices.Contains(attrs.AvailableStorageClasses, disk.StorageClass) {
			return domainVerdict{kind: domainNoStorageClass, name: disk.StorageClass}
		}
	}
	for _, i := range class.Spec.Network.Interfaces {
		if attrs.AvailableNetworkClasses != nil && !slices.Contains(attrs.AvailableNetworkClasses, i.NetworkClass) {
			return domainVerdict{kind: domainNoNetworkClass, name: i.NetworkClass}
		}
	}
	for _, f := range features {
		if attrs.Features != nil && !slices.Contains(attrs.Features, f) {
			return domainVerdict{kind: domainNoFeature, name: f}
		}
	}
	return domainVerdict{}
}

// requiredFeatures returns the class's features plus those its firmware implies.
func requiredFeatures(c *banlieuev1.VMClass) []string {
	if c.Spec.Firmware == banlieuev1.FirmwareEFISecure && !slices.Contains(c.Spec.Features, efiSecureBootFeature) {
		return append(slices.Clone(c.Spec.Features), efiSecureBootFeature)
	}
	return c.Spec.Features
}

func domainName(fd *banlieuev1.FailureDomain) string {
	return cmp.Or(fd.Name, "(default)")
}

// conditionDetail quotes the Provider's condition c for the VM's tenant, sanitized.
func conditionDetail(p *banlieuev1.Provider, c *metav1.Condition) string {
	if c == nil || c.Message == "" {
		return ""
	}
	return " (" + Sanitize(p, c.Message) + ")"
}

// Message renders the rejections of a VM in namespace as one deterministic sentence
// per Provider that admits the namespace; the Providers that do not are counted, never
// named, so that a tenant learns nothing of Providers meant for others.
func Message(namespace string, rejections []Rejection) string {
	if len(rejections) == 0 {
		return "no Provider exists that could run this VM"
	}
	var b strings.Builder
	b.WriteString("no Provider can run this VM: ")
	named, notAdmitted := 0, 0
	for _, r := range rejections {
		switch {
		case r.NotAdmitted:
			notAdmitted++
			continue
		case named >= maxRejectionsInMessage:
			named++
			continue
		case named > 0:
			b.WriteString("; ")
		}
		named++
		b.WriteString(r.Provider + ": " + r.Reason)
	}
	if more := named - maxRejectionsInMessage; more > 0 {
		fmt.Fprintf(&b, "; and %d more", more)
	}
	if notAdmitted > 0 {
		if named > 0 {
			b.WriteString("; ")
		}
		if notAdmitted == 1 {
			fmt.Fprintf(&b, "1 Provider does not admit namespace %q", namespace)
		} else {
			fmt.Fprintf(&b, "%d Providers do not admit namespace %q", notAdmitted, namespace)
		}
	}
	return b.String()
}
