// Package monitoring keeps banlieue's alerts and Grafana dashboard (config/monitoring,
// and the chart's copies) true: every PromQL expression parses, every alert has a
// severity, a summary, a description and a runbook section in docs/troubleshooting.md,
// and every metric a panel or an alert queries is one that banlieue's binaries export,
// scraped from a real run of the core controller and the vSphere provider.
package monitoring
