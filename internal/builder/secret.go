package builder

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// Secret returns the Secret namespace/name holding data, such as a Provider's
// credentials or a VM's user data.
func Secret(namespace, name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Data: data}
}

// UserDataSecret returns the Secret namespace/name of type banlieue.io/user-data, the
// only type a provider hands to a guest, holding data (the payload under "user-data"
// unless the VM's spec.userData.key says otherwise).
func UserDataSecret(namespace, name string, data map[string][]byte) *corev1.Secret {
	s := Secret(namespace, name, data)
	s.Type = banlieuev1.UserDataSecretType
	return s
}
