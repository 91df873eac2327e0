package capi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	"github.com/banlieue/banlieue/test/testenv"
)

// assetsEnv names the folder hack/capi.sh prints: Cluster API's manager, clusterctl, CRDs
// and the kustomize configs of its components.
const assetsEnv = "BANLIEUE_CAPI_ASSETS"

// missingAssets says how to get Cluster API's binaries.
const missingAssets = assetsEnv + " is not set; run the tests through 'make test', or set it to the folder 'bash hack/capi.sh | tail -n 1' prints"

// managerUser is the API server user Cluster API's manager runs as: no group, only the
// RBAC Cluster API's own config grants its manager plus what aggregates into it, so the
// suite proves banlieue's aggregated ClusterRole suffices.
const managerUser = "capi-manager"

var (
	// cfg is an admin config for the suite's API server.
	cfg *rest.Config
	// k8s is a direct (uncached) admin client to it, for the tests themselves.
	k8s client.Client
	// capiAssets is the folder hack/capi.sh built.
	capiAssets string
	// manager is Cluster API's core manager process; managerLog its log file.
	manager    *exec.Cmd
	managerLog string
	// managerExited is closed when the manager process ends.
	managerExited chan struct{}
)

// TestMain starts a real kube-apiserver and etcd with banlieue's and Cluster API's CRDs,
// and Cluster API's core manager as a process, for the whole suite. Each test starts
// the simulators and banlieue providers it needs.
func TestMain(m *testing.M) {
	if !testenv.Available("the Cluster API suite") {
		os.Exit(0)
	}
	capiAssets = os.Getenv(assetsEnv)
	if capiAssets == "" {
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, missingAssets)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "skipping the Cluster API suite: %s\n", missingAssets)
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	out := io.Discard
	if os.Getenv("BANLIEUE_TEST_LOGS") != "" {
		out = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(out)))
	scheme, err := testenv.Scheme()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env := &crenvtest.Environment{
		ErrorIfCRDPathMissing: true,
		CRDDirectoryPaths:     []string{testenv.RepoPath("config/crd/bases"), filepath.Join(capiAssets, "crd")},
	}
	cfg, err = env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, errors.Join(fmt.Errorf("failed to start envtest: %w", err), env.Stop()))
		return 1
	}
	defer func() { _ = env.Stop() }()
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "banlieue-capi-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := startManager(env, dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	_ = manager.Process.Signal(syscall.SIGTERM)
	select {
	case <-managerExited:
	case <-time.After(10 * time.Second):
		_ = manager.Process.Kill()
		<-managerExited
	}
	if code != 0 || os.Getenv("BANLIEUE_TEST_LOGS") != "" {
		// The folder stays, with the manager's whole log, for whoever reads the failure.
		printTail(managerLog, 100)
		return code
	}
	_ = os.RemoveAll(dir)
	return code
}

// startManager grants managerUser Cluster API's manager RBAC and banlieue's aggregated
// ClusterRole, and starts Cluster API's core manager as that user.
func startManager(env *crenvtest.Environment, dir string) error {
	ctx := context.Background()
	for _, f := range []string{
		filepath.Join(capiAssets, "config/core/rbac/role.yaml"),
		filepath.Join(capiAssets, "config/core/rbac/aggregated_role.yaml"),
		testenv.RepoPath("config/rbac/capi/role.yaml"),
	} {
		objs, err := readObjects(f)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if err := k8s.Create(ctx, o); err != nil {
				return fmt.Errorf("failed to create %s %s from %s: %w", o.GetKind(), o.GetName(), f, err)
			}
		}
	}
	if err := aggregate(ctx, "aggregated-manager-role"); err != nil {
		return err
	}
	for _, role := range []string{"manager-role", "aggregated-manager-role"} {
		b := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: managerUser + "-" + role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: managerUser}},
		}
		if err := k8s.Create(ctx, b); err != nil {
			return fmt.Errorf("failed to bind %s to %s: %w", role, managerUser, err)
		}
	}
	u, err := env.AddUser(crenvtest.User{Name: managerUser}, nil)
	if err != nil {
		return fmt.Errorf("failed to create the user %s: %w", managerUser, err)
	}
	kubeconfig, err := u.KubeConfig()
	if err != nil {
		return err
	}
	kubeconfigPath := filepath.Join(dir, "capi-manager.kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		return err
	}
	// The webhook server needs a serving certificate to start, though no API server
	// calls it: Cluster API's webhook configurations are not installed.
	certDir := filepath.Join(dir, "webhook-certs")
	if err := writeServingCert(certDir); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	managerLog = filepath.Join(dir, "capi-manager.log")
	log, err := os.Create(managerLog)
	if err != nil {
		return err
	}
	manager = exec.Command(filepath.Join(capiAssets, "manager"),
		"--kubeconfig", kubeconfigPath,
		"--leader-elect=false",
		"--diagnostics-address=0",
		"--insecure-diagnostics",
		"--health-addr=0",
		"--webhook-port", strconv.Itoa(port),
		"--webhook-cert-dir", certDir,
		// Short enough that a Machine's phase follows its infrastructure machine within
		// the tests' timeouts when a watch event is missed; the default is 10 minutes.
		"--sync-period=1m",
	)
	manager.Stdout, manager.Stderr = log, log
	// The manager dies with the test binary, so a failed run leaves no process behind.
	manager.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := manager.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("failed to start Cluster API's manager: %w", err)
	}
	managerExited = make(chan struct{})
	go func() {
		_ = manager.Wait()
		_ = log.Close()
		close(managerExited)
	}()
	return nil
}

// managerRunning fails the test when Cluster API's manager has exited.
func managerRunning(tb testing.TB) {
	tb.Helper()
	select {
	case <-managerExited:
		printTail(managerLog, 50)
		tb.Fatalf("Cluster API's manager exited: %v", manager.ProcessState)
	default:
	}
}

// aggregate fills the rules of the ClusterRole name from the ClusterRoles its
// aggregationRule selects, as kube-controller-manager's aggregation controller does:
// envtest runs no kube-controller-manager, and without this banlieue's ClusterRole,
// selected by its label cluster.x-k8s.io/aggregate-to-manager, would grant nothing.
func aggregate(ctx context.Context, name string) error {
	role := &rbacv1.ClusterRole{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: name}, role); err != nil {
		return err
	}
	if role.AggregationRule == nil {
		return fmt.Errorf("ClusterRole %s has no aggregationRule", name)
	}
	role.Rules = nil
	for _, sel := range role.AggregationRule.ClusterRoleSelectors {
		selector, err := metav1.LabelSelectorAsSelector(&sel)
		if err != nil {
			return err
		}
		list := &rbacv1.ClusterRoleList{}
		if err := k8s.List(ctx, list, client.MatchingLabelsSelector{Selector: selector}); err != nil {
			return err
		}
		for _, r := range list.Items {
			role.Rules = append(role.Rules, r.Rules...)
		}
	}
	if len(role.Rules) == 0 {
		return fmt.Errorf("no ClusterRole aggregates into %s", name)
	}
	return k8s.Update(ctx, role)
}

// readObjects reads the YAML documents of a file as objects.
func readObjects(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	for _, doc := range strings.Split(string(data), "\n---") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &o.Object); err != nil {
			return nil, fmt.Errorf("failed to read %s: %w", path, err)
		}
		if len(o.Object) > 0 {
			objs = append(objs, o)
		}
	}
	return objs, nil
}

// writeServingCert writes a self-signed loopback certificate and its key as tls.crt
// and tls.key in dir.
func writeServingCert(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "capi-webhook"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// printTail prints the last n lines of a log file to stderr.
func printTail(path string, n int) {
	data, err := os.ReadFile(path)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	fmt.Fprintf(os.Stderr, "--- the last %d lines of Cluster API's manager log (%s):\n%s\n", len(lines), path, strings.Join(lines, "\n"))
}
