// Package admission installs banlieue's admission policies (config/admission) into an
// API server, as a cluster's installation has them, and waits until the API server runs
// them. banlieue dev and the test harnesses use it.
package admission

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
)

// Dir is where the admission policies banlieue installs live, relative to the
// repository's root.
const Dir = "config/admission"

// Install creates the admission policies of dir (each YAML file but
// kustomization.yaml), leaving those that exist as they are, and waits until the API
// server runs them: a policy is in force only once the API server has seen it and its
// binding, and a VM created before that would cost core the write the policy saves.
func Install(ctx context.Context, cfg *rest.Config, dir string) error {
	scheme := k8sruntime.NewScheme()
	if err := banlieuev1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("failed to create a client: %w", err)
	}
	objs, err := readManifests(dir)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to create %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	// A VM created with dry-run passes the mutating admission a real one does; a
	// generated name cannot meet a VM that exists.
	probe := builder.VirtualMachine("default", "", "probe", "probe")
	probe.GenerateName = "admission-probe-"
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		vm := probe.DeepCopy()
		if err := c.Create(ctx, vm, client.DryRunAll); err != nil {
			// The CRD is established, but discovery may not list it for a moment yet,
			// nor the admission policies know its schema (503 ServiceUnavailable).
			if meta.IsNoMatchError(err) || apierrors.IsServiceUnavailable(err) {
				return false, nil
			}
			return false, err
		}
		return slices.Contains(vm.Finalizers, banlieuev1.VirtualMachineFinalizer), nil
	})
	if err != nil {
		return fmt.Errorf("the API server does not run the admission policies of %s: %w", dir, err)
	}
	return nil
}

// readManifests decodes every object of the YAML files in dir but kustomization.yaml.
func readManifests(dir string) ([]*unstructured.Unstructured, error) {
	files := os.DirFS(dir)
	names, err := fs.Glob(files, "*.yaml")
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	for _, name := range names {
		if name == "kustomization.yaml" {
			continue
		}
		data, err := fs.ReadFile(files, name)
		if err != nil {
			return nil, err
		}
		d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			o := &unstructured.Unstructured{}
			err := d.Decode(&o.Object)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("failed to read %s: %w", filepath.Join(dir, name), err)
			}
			if len(o.Object) > 0 {
				objs = append(objs, o)
			}
		}
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("no admission policies in %s", dir)
	}
	return objs, nil
}
