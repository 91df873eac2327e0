package providersdk

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// failureDomainSummary is status.failureDomainSummary for domains: up to three names
// in at most 64 characters (the first always, cut with "…" when longer), then
// "(+N more)" for the rest.
func failureDomainSummary(domains []banlieuev1.FailureDomain) string {
	const maxNames, maxLen = 3, 64
	names := make([]string, 0, maxNames)
	width := 0 // characters of the names and the separators between them
	for _, d := range domains {
		name := d.Name
		if len(names) == 0 && utf8.RuneCountInString(name) > maxLen {
			name = string([]rune(name)[:maxLen-1]) + "…"
		}
		w := utf8.RuneCountInString(name)
		if len(names) > 0 {
			w += len(", ")
		}
		if len(names) == maxNames || len(names) > 0 && width+w > maxLen {
			break
		}
		names = append(names, name)
		width += w
	}
	summary := strings.Join(names, ", ")
	if more := len(domains) - len(names); more > 0 {
		summary += fmt.Sprintf(" (+%d more)", more)
	}
	return summary
}

// patchStatus writes status when it differs from the Provider's.
func (r *ProviderReconciler) patchStatus(ctx context.Context, p *banlieuev1.Provider, status *banlieuev1.ProviderStatus) error {
	if equality.Semantic.DeepEqual(&p.Status, status) {
		return nil
	}
	before := p.DeepCopy()
	p.Status = *status
	if err := r.client.Status().Patch(ctx, p, client.MergeFrom(before)); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("failed to patch Provider status: %w", err))
	}
	return nil
}
