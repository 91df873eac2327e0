package monitoring

import (
	"bytes"
	"os"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/banlieue/banlieue/test/testenv"
)

func TestTheChartShipsTheSameAlertsAndDashboard(t *testing.T) {
	for src, cp := range map[string]string{
		rulePath:      "charts/banlieue/files/monitoring/prometheusrule.yaml",
		dashboardPath: "charts/banlieue/files/monitoring/banlieue.json",
	} {
		want, err := os.ReadFile(testenv.RepoPath(src))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(testenv.RepoPath(cp))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, got) {
			t.Errorf("%s differs from %s: run 'make generate'", cp, src)
		}
	}
}

func TestKustomizeRendersTheRuleAndTheDashboardConfigMap(t *testing.T) {
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), testenv.RepoPath("config/monitoring"))
	if err != nil {
		t.Fatal(err)
	}
	dashboardJSON, err := os.ReadFile(testenv.RepoPath(dashboardPath))
	if err != nil {
		t.Fatal(err)
	}
	kinds := make([]string, 0, len(res.Resources()))
	for _, r := range res.Resources() {
		kinds = append(kinds, r.GetKind()+"/"+r.GetName())
		switch r.GetKind() {
		case "PrometheusRule":
			b, err := r.AsYAML()
			if err != nil {
				t.Fatal(err)
			}
			var got prometheusRule
			if err := yaml.UnmarshalStrict(b, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(loadRule(t).Spec, got.Spec); diff != "" {
				t.Errorf("rendered rule (-file +rendered):\n%s", diff)
			}
			if got.Metadata.Namespace != "banlieue-system" {
				t.Errorf("the rule is in namespace %q, want banlieue-system", got.Metadata.Namespace)
			}
		case "ConfigMap":
			if l := r.GetLabels()["grafana_dashboard"]; l != "1" {
				t.Errorf("the dashboard ConfigMap's grafana_dashboard label is %q, want \"1\" (Grafana's sidecar looks for it)", l)
			}
			if got := r.GetDataMap()["banlieue.json"]; got != string(dashboardJSON) {
				t.Errorf("the ConfigMap's banlieue.json differs from %s", dashboardPath)
			}
		}
	}
	slices.Sort(kinds)
	if diff := cmp.Diff([]string{"ConfigMap/banlieue-dashboard", "PrometheusRule/banlieue"}, kinds); diff != "" {
		t.Errorf("rendered objects (-want +got):\n%s", diff)
	}
}

func TestExportedKnowsWhatAHistogramServes(t *testing.T) {
	families := map[string]*dto.MetricFamily{
		"a_total":   {Type: dto.MetricType_COUNTER.Enum()},
		"b_seconds": {Type: dto.MetricType_HISTOGRAM.Enum()},
		"c_seconds": {Type: dto.MetricType_SUMMARY.Enum()},
	}
	for name, want := range map[string]bool{
		"a_total": true, "a_total_count": false, "b_seconds": true, "b_seconds_bucket": true,
		"b_seconds_sum": true, "b_seconds_count": true, "c_seconds_count": true, "c_seconds_bucket": false,
		"d_total": false,
	} {
		if got := exported(families, name); got != want {
			t.Errorf("exported(%q) = %v, want %v", name, got, want)
		}
	}
}
