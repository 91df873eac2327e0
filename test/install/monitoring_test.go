package install

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/banlieue/banlieue/test/testenv"
)

// TestTheChartRendersTheAlertsAndTheDashboardAsKustomizeDoes renders the chart with
// monitoring on and config/monitoring, and compares the PrometheusRule's spec and the
// dashboard: the chart reads the copies 'make generate' keeps of config/monitoring.
func TestTheChartRendersTheAlertsAndTheDashboardAsKustomizeDoes(t *testing.T) {
	want, err := render(testenv.RepoPath("config/monitoring"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := renderChart(t, "monitoring.prometheusRule.enabled=true", "monitoring.dashboard.enabled=true",
		"monitoring.prometheusRule.labels.release=kube-prometheus-stack")
	if err != nil {
		t.Fatal(err)
	}
	find := func(objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
		t.Helper()
		for _, o := range objs {
			if o.GetKind() == kind {
				return o
			}
		}
		t.Fatalf("no %s rendered", kind)
		return nil
	}
	for _, kind := range []string{"PrometheusRule", "ConfigMap"} {
		w, g := find(want, kind), find(got, kind)
		field := map[string]string{"PrometheusRule": "spec", "ConfigMap": "data"}[kind]
		if diff := cmp.Diff(w.Object[field], g.Object[field]); diff != "" {
			t.Errorf("%s %s (-kustomize +helm):\n%s", kind, field, diff)
		}
		if g.GetNamespace() != systemNamespace {
			t.Errorf("the chart's %s is in namespace %q, want the release's, %s", kind, g.GetNamespace(), systemNamespace)
		}
	}
	if l := find(got, "ConfigMap").GetLabels()["grafana_dashboard"]; l != "1" {
		t.Errorf("the chart's dashboard ConfigMap has grafana_dashboard %q, want \"1\"", l)
	}
	if l := find(got, "PrometheusRule").GetLabels()["release"]; l != "kube-prometheus-stack" {
		t.Errorf("monitoring.prometheusRule.labels did not reach the PrometheusRule: release=%q", l)
	}

	defaults, err := renderChart(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range defaults {
		if o.GetKind() == "PrometheusRule" || o.GetName() == "banlieue-dashboard" {
			t.Errorf("the chart renders %s %s by default; monitoring is off unless enabled", o.GetKind(), o.GetName())
		}
	}
}
