package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/banlieue/banlieue/test/testenv"
)

const (
	// rulePath and dashboardPath are the sources; the chart holds copies.
	rulePath      = "config/monitoring/prometheusrule.yaml"
	dashboardPath = "config/monitoring/dashboards/banlieue.json"
	// runbookBase is where every alert's runbook_url points, followed by an anchor.
	runbookBase = "https://github.com/banlieue/banlieue/blob/main/docs/troubleshooting.md#"
)

// prometheusRule is the part of a monitoring.coreos.com/v1 PrometheusRule banlieue
// writes; decoding is strict, so a misspelt field fails.
type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Groups []ruleGroup `json:"groups"`
	} `json:"spec"`
}

type ruleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []rule `json:"rules"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func loadRule(t *testing.T) prometheusRule {
	t.Helper()
	return load[prometheusRule](t, rulePath, func(b []byte, v any) error { return yaml.UnmarshalStrict(b, v) })
}

// load decodes the repository file path with unmarshal.
func load[T any](t *testing.T, path string, unmarshal func([]byte, any) error) T {
	t.Helper()
	data, err := os.ReadFile(testenv.RepoPath(path))
	if err != nil {
		t.Fatal(err)
	}
	var v T
	if err := unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// dashboard is the part of a Grafana dashboard the checks read.
type dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID      int      `json:"id"`
	Type    string   `json:"type"`
	Title   string   `json:"title"`
	Targets []target `json:"targets"`
	// Panels are those of a collapsed row.
	Panels []panel `json:"panels"`
}

type target struct {
	RefID string `json:"refId"`
	Expr  string `json:"expr"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	return load[dashboard](t, dashboardPath, json.Unmarshal)
}

// flatten returns the dashboard's panels, those inside rows included.
func (d dashboard) flatten() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// grafanaVariables are the variables Grafana replaces in a query before Prometheus
// sees it, with a value that parses in their place.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// query is one PromQL expression and where it is used.
type query struct {
	where string
	expr  string
}

// queries returns every expression of the rule and the dashboard.
func queries(t *testing.T) []query {
	t.Helper()
	var qs []query
	for _, g := range loadRule(t).Spec.Groups {
		for _, r := range g.Rules {
			qs = append(qs, query{where: fmt.Sprintf("%s: group %s, alert %s", rulePath, g.Name, r.Alert+r.Record), expr: r.Expr})
		}
	}
	for _, p := range loadDashboard(t).flatten() {
		for _, tg := range p.Targets {
			qs = append(qs, query{where: fmt.Sprintf("%s: panel %q, target %s", dashboardPath, p.Title, tg.RefID), expr: grafanaVariables.Replace(tg.Expr)})
		}
	}
	return qs
}

var promql = parser.NewParser(parser.Options{})

// metricNames returns the metric names expr selects, as written (a histogram's
// _bucket included).
func metricNames(expr string) ([]string, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			if name == "" {
				// {__name__="..."}: only an exact name can be checked.
				for _, m := range vs.LabelMatchers {
					if m.Name == model.MetricNameLabel {
						name = m.Value
					}
				}
			}
			names = append(names, name)
		}
		return nil
	})
	return names, nil
}

// queriedMetrics returns every metric name the rule and the dashboard query, with the
// places that query it.
func queriedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, q := range queries(t) {
		names, err := metricNames(q.expr)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: %q queries no metric", q.where, q.expr)
		}
		for _, n := range names {
			if !slices.Contains(out[n], q.where) {
				out[n] = append(out[n], q.where)
			}
		}
	}
	return out
}

func TestEveryQueryParsesAndNamesItsMetrics(t *testing.T) {
	qs := queries(t)
	if len(qs) < 10 {
		t.Fatalf("only %d queries in the rule and the dashboard", len(qs))
	}
	for name, where := range queriedMetrics(t) {
		if !model.LegacyValidation.IsValidMetricName(name) {
			t.Errorf("%q (in %s) is not a plain metric name: a selector must name its metric", name, strings.Join(where, "; "))
		}
	}
}

// alertTemplateFuncs stand for the functions Prometheus offers alert templates, so
// that a template that calls another one fails to parse.
var alertTemplateFuncs = template.FuncMap{
	"humanize": fmt.Sprint, "humanize1024": fmt.Sprint, "humanizeDuration": fmt.Sprint,
	"humanizePercentage": fmt.Sprint, "humanizeTimestamp": fmt.Sprint, "title": strings.ToUpper,
	"toUpper": strings.ToUpper, "toLower": strings.ToLower,
}

// alertTemplateHeader is what Prometheus puts before an alert's template: the
// variables it may use.
const alertTemplateHeader = "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"

// headingAnchors returns the anchors GitHub gives the headings of a Markdown file.
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(testenv.RepoPath(path))
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	anchors := map[string]bool{}
	for line := range strings.SplitSeq(string(data), "\n") {
		if h, ok := strings.CutPrefix(line, "#"); ok {
			h = strings.TrimSpace(strings.TrimLeft(h, "#"))
			anchors[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")] = true
		}
	}
	return anchors
}

func TestEveryAlertSaysHowBadItIsWhatItMeansAndWhereItsRunbookIs(t *testing.T) {
	r := loadRule(t)
	if r.APIVersion != "monitoring.coreos.com/v1" || r.Kind != "PrometheusRule" || r.Metadata.Name == "" {
		t.Fatalf("%s is %s %s %q, want a named monitoring.coreos.com/v1 PrometheusRule", rulePath, r.APIVersion, r.Kind, r.Metadata.Name)
	}
	anchors := headingAnchors(t, "docs/troubleshooting.md")
	seen := map[string]bool{}
	for _, g := range r.Spec.Groups {
		if len(g.Rules) == 0 {
			t.Errorf("group %s has no rule", g.Name)
		}
		for _, a := range g.Rules {
			if a.Alert == "" {
				t.Errorf("group %s: a rule without an alert name (record rules are not expected)", g.Name)
				continue
			}
			if seen[a.Alert] {
				t.Errorf("alert %s is defined twice", a.Alert)
			}
			seen[a.Alert] = true
			if _, err := promql.ParseExpr(a.Expr); err != nil {
				t.Errorf("alert %s: expr: %v", a.Alert, err)
			}
			if d, err := model.ParseDuration(a.For); err != nil || time.Duration(d) < time.Minute {
				t.Errorf("alert %s: for %q, want a duration of at least a minute (%v)", a.Alert, a.For, err)
			}
			if s := a.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("alert %s: severity %q, want critical or warning", a.Alert, s)
			}
			for _, k := range []string{"summary", "description"} {
				v := a.Annotations[k]
				if strings.TrimSpace(v) == "" {
					t.Errorf("alert %s: no %s", a.Alert, k)
				}
				if _, err := template.New(k).Funcs(alertTemplateFuncs).Parse(alertTemplateHeader + v); err != nil {
					t.Errorf("alert %s: %s: %v", a.Alert, k, err)
				}
			}
			anchor, ok := strings.CutPrefix(a.Annotations["runbook_url"], runbookBase)
			if want := strings.ToLower(a.Alert); !ok || anchor != want {
				t.Errorf("alert %s: runbook_url %q, want %s%s", a.Alert, a.Annotations["runbook_url"], runbookBase, want)
			} else if !anchors[anchor] {
				t.Errorf("alert %s: docs/troubleshooting.md has no heading %q (anchor #%s)", a.Alert, a.Alert, anchor)
			}
		}
	}
	if len(seen) == 0 {
		t.Fatal("no alert")
	}
}

func TestEveryDashboardPanelHasAQuery(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("the dashboard has uid %q and title %q; both are needed for a stable import", d.UID, d.Title)
	}
	ids := map[int]string{}
	for _, p := range d.flatten() {
		if prev, ok := ids[p.ID]; ok {
			t.Errorf("panels %q and %q share the id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q, target %s: empty expr", p.Title, tg.RefID)
			}
		}
	}
}
