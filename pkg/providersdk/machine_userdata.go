package providersdk

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// errUserDataNotFound says the Secret or key in spec.userData does not exist.
var errUserDataNotFound = errors.New("user-data not found")

// errUserDataNotPermitted says the Secret in spec.userData is not of a user-data type.
var errUserDataNotPermitted = errors.New("user-data not permitted")

// userData reads the payload spec.userData names, or nil when there is none. The Secret
// is read with the uncached reader, in the machine's own namespace, and only one marked
// as user data by its type is used: whoever may create a machine must not be able to
// copy any Secret of the namespace into a guest they control. bootstrapFrom, when set,
// is the Cluster API Machine whose bootstrap data Secret spec.userData was set to (in
// memory, by clusterAPI.apply): the messages then name that Machine's field.
func (r *Reconciler) userData(ctx context.Context, m *Machine, bootstrapFrom string) ([]byte, error) {
	ud := m.Spec.UserData
	if ud == nil {
		return nil, nil
	}
	key := cmp.Or(ud.Key, "user-data")
	field, fix := "the VM's spec.userData", "create it in the VM's namespace"
	keyFix := "add the key, or set the VM's spec.userData.key"
	if bootstrapFrom != "" {
		field = fmt.Sprintf("Machine %s's spec.bootstrap.dataSecretName", bootstrapFrom)
		fix = "Cluster API's bootstrap provider writes it"
		keyFix = "a Cluster API bootstrap data Secret holds its payload under that key"
	}
	secret := &corev1.Secret{}
	if err := r.reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ud.SecretRef.Name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("secret %s/%s named by %s does not exist; %s: %w",
				m.Namespace, ud.SecretRef.Name, field, fix, errUserDataNotFound)
		}
		return nil, fmt.Errorf("failed to get user-data Secret: %w", err)
	}
	if secret.Type != banlieuev1.UserDataSecretType && secret.Type != banlieuev1.ClusterAPIBootstrapSecretType {
		return nil, fmt.Errorf("secret %s/%s named by %s is of type %q; only a Secret of type %s (or %s) is handed to a guest, so recreate it with that type: %w",
			m.Namespace, ud.SecretRef.Name, field, cmp.Or(string(secret.Type), string(corev1.SecretTypeOpaque)), banlieuev1.UserDataSecretType, banlieuev1.ClusterAPIBootstrapSecretType, errUserDataNotPermitted)
	}
	data, ok := secret.Data[key]
	if !ok {
		return nil, fmt.Errorf("secret %s/%s has no key %q (it has %s); %s: %w",
			m.Namespace, ud.SecretRef.Name, key, keysOf(secret.Data), keyFix, errUserDataNotFound)
	}
	return data, nil
}

// keysOf lists a Secret's keys, sorted, for a message; never its values.
func keysOf(data map[string][]byte) string {
	if len(data) == 0 {
		return "no keys"
	}
	keys := slices.Sorted(maps.Keys(data))
	return fmt.Sprintf("%q", keys)
}
