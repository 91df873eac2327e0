package proxmox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
)

// Keys of the credentials Secret: either an API token or a user and password.
const (
	// TokenIDKey is the Secret key holding an API token's ID, user@realm!name.
	TokenIDKey = pve.TokenIDKey
	// TokenSecretKey is the Secret key holding the API token's secret.
	TokenSecretKey = pve.TokenSecretKey
	// UsernameKey is the Secret key holding a user name, user@realm.
	UsernameKey = pve.UsernameKey
	// PasswordKey is the Secret key holding the user's password.
	PasswordKey = pve.PasswordKey
)

// Keys of the Provider's spec.parameters this driver reads.
const (
	// ParamSnippetsStorage names the storage that holds cloud-init snippets.
	ParamSnippetsStorage = "snippetsStorage"
	// ParamISOStorage names the storage that holds the machines' NoCloud seed ISOs; it
	// needs the iso content type.
	ParamISOStorage = "isoStorage"
	// ParamPool is the resource pool new VMs join.
	ParamPool = "pool"
	// ParamNode limits the failure domains to these comma-separated nodes; the first
	// online one also receives image imports.
	ParamNode = "node"
	// ParamImageStorage names the storage that Url images are downloaded to; it needs
	// the import content type.
	ParamImageStorage = "imageStorage"
	// ParamTemplateStorage names the storage that holds the disks of imported
	// templates.
	ParamTemplateStorage = "templateStorage"
)

// session is one authenticated client of a PVE cluster: the providersdk.Client of a
// Provider.
type session struct {
	driver *Driver
	api    *pve.Client

	// cluster is the cluster's name, or the Provider's for a standalone node.
	cluster string

	nodes           []string
	snippetsStorage string
	isoStorage      string
	pool            string
	storageClasses  []providersdk.ClassTarget
	networkClasses  []providersdk.ClassTarget
	features        []string
	imageStorage    string
	templateStorage string
	// importLimits are the Provider's import parameters, checked before PVE downloads.
	importLimits providersdk.ImportLimits
	// hotplug is what new VMs may grow while they run (see hotplug.go); hotplugErr
	// says why the Provider's parameters for it do not parse, which Inventory reports
	// and Create refuses on.
	hotplug    providersdk.Hotplug
	hotplugErr error

	// nodeCPUsMu guards nodeCPUs: each node's CPU count, as the cluster last listed it
	// (Inventory, or Update when it needs one), the most a VM there may have.
	nodeCPUsMu sync.Mutex
	nodeCPUs   map[string]int

	// importsMu guards imports, each image's import as this session knows it.
	importsMu sync.Mutex
	imports   map[k8stypes.UID]*importState

	// clonesMu guards clones: the clone tasks this session started, by UPID, with the
	// machine each makes a VM for (see pendingClone).
	clonesMu sync.Mutex
	clones   map[string]startedClone

	// vmids hands out the VMIDs of new VMs: the driver's pool for the cluster, shared
	// by its sessions.
	vmids *vmidPool

	// reuseFrom is when this session's listings begin to be reused (see
	// reusesListing): a listingGrace after it was made.
	reuseFrom time.Time

	// destroyed remembers where the VM of each machine was that this session saw a
	// destroy task end well for, by UID (see sawDestroyed).
	destroyed memory[k8stypes.UID, location]
}

var (
	_ providersdk.Client          = (*session)(nil)
	_ providersdk.InventoryReader = (*session)(nil)
	_ providersdk.ImageResolver   = (*session)(nil)
)

// Connect checks the Provider's credentials against its PVE API with one call that
// also tells the cluster's name, and returns the session. It fails with
// providersdk.Unreachable when PVE cannot be reached or its certificate not verified,
// providersdk.Unauthorized when it rejects the credentials, and providersdk.Permanent
// when the Provider or its Secret is incomplete.
func (d *Driver) Connect(ctx context.Context, info providersdk.ProviderInfo) (providersdk.Client, error) {
	p := info.Provider
	if p == nil {
		return nil, providersdk.Permanent(infrav1.MachineFailedReason, "the Provider is missing")
	}
	api, err := pve.New(pve.Connection{
		Endpoint:              p.Spec.Connection.Endpoint,
		Credentials:           info.Credentials,
		SecretRef:             info.SecretRef(),
		InsecureSkipTLSVerify: ptr.Deref(p.Spec.Connection.InsecureSkipTLSVerify, false),
		RootCAs:               info.RootCAs,
		ResponseTimeout:       d.responseTimeout,
		Class:                 ProviderClass,
		WrapTransport:         d.wrapTransport,
	})
	if err != nil {
		return nil, err
	}
	cl, err := api.Cluster(ctx)
	if err != nil {
		api.Close()
		return nil, credentialsLackPrivilege(api, info, err)
	}
	s := &session{
		driver:          d,
		api:             api,
		cluster:         first(cl.Name, p.Name),
		snippetsStorage: p.Spec.Parameters[ParamSnippetsStorage],
		isoStorage:      p.Spec.Parameters[ParamISOStorage],
		pool:            p.Spec.Parameters[ParamPool],
		storageClasses:  info.StorageClasses(),
		networkClasses:  info.NetworkClasses(),
		features:        p.Spec.Capabilities.Features,
		imageStorage:    p.Spec.Parameters[ParamImageStorage],
		templateStorage: p.Spec.Parameters[ParamTemplateStorage],
		importLimits:    providersdk.ImportLimitsFrom(p.Spec.Parameters),
		imports:         map[k8stypes.UID]*importState{},
		clones:          map[string]startedClone{},
		nodeCPUs:        map[string]int{},
		reuseFrom:       time.Now().Add(listingGrace),
	}
	s.hotplug, s.hotplugErr = providersdk.HotplugFrom(p.Spec.Parameters)
	for _, n := range strings.Split(p.Spec.Parameters[ParamNode], ",") {
		if n = strings.TrimSpace(n); n != "" {
			s.nodes = append(s.nodes, n)
		}
	}
	// Sessions of the same cluster (two Providers, or a session and the one that
	// replaces it) share the pool; a standalone node is known by its address.
	if cl.Clustered {
		s.vmids = d.vmidPool("cluster " + s.cluster)
	} else {
		s.vmids = d.vmidPool("node " + api.Host())
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Connected to Proxmox VE", "endpoint", api.URL(), "cluster", s.cluster)
	return s, nil
}

// credentialsLackPrivilege reports a PVE that took the credentials but refuses the
// cluster's status for want of a privilege (Sys.Audit on /) as rejected credentials:
// the Provider's CredentialsValid condition turns False with a message naming the
// privilege and path, as the credentials cannot serve the provider. Other errors are
// returned as they are.
func credentialsLackPrivilege(api *pve.Client, info providersdk.ProviderInfo, err error) error {
	pe, ok := pve.AsPermissionError(err)
	if !ok {
		return err
	}
	msg := fmt.Sprintf("Proxmox VE %s accepted the credentials in Secret %s, but ", api.Host(), info.SecretRef())
	if pe.Privilege != "" {
		msg += fmt.Sprintf("they lack %s on %s, which the provider needs", pe.Privilege, pe.Path)
	} else {
		msg += "they lack a privilege the provider needs"
	}
	// The PVE error stays out of the chain: it is a PermanentError, which the SDK would
	// otherwise also see.
	return providersdk.Unauthorized(errors.New(msg))
}

// Disconnect closes the session's idle connections.
func (s *session) Disconnect(context.Context) error {
	s.api.Close()
	return nil
}
