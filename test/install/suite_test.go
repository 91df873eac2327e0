package install

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/banlieue/banlieue/test/testenv"
)

var (
	// env is the suite's API server, with no CRD installed: the manifests install them.
	env *testenv.Env
	// k8s is an admin client to it.
	k8s client.Client
)

// TestMain starts one real kube-apiserver and etcd, with RBAC authorization, for the suite.
func TestMain(m *testing.M) {
	if !testenv.Available("the installation suite") {
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	k8s = env.Client
	return m.Run()
}

var (
	installOnce sync.Once
	installErr  error
)

// installed installs config/default and every provider overlay once for the suite, as
// install does, and fails the test if that failed.
func installed(tb testing.TB) {
	tb.Helper()
	installOnce.Do(func() { installErr = install(context.Background()) })
	if installErr != nil {
		tb.Fatal(installErr)
	}
}

// serviceAccountConfig is a config that impersonates the ServiceAccount name in the
// system namespace, with the groups the API server gives a ServiceAccount's token.
func serviceAccountConfig(name string) *rest.Config {
	c := rest.CopyConfig(env.Config)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + systemNamespace + ":" + name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + systemNamespace, "system:authenticated"},
	}
	return c
}
