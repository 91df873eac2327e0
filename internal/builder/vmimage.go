package builder

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// VMImage returns a VMImage named name with sources and no operating system details.
func VMImage(name string, sources ...banlieuev1.ImageSource) *banlieuev1.VMImage {
	return &banlieuev1.VMImage{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       banlieuev1.VMImageSpec{Sources: sources},
	}
}

// Template returns an image source: the template ref on the backends of the provider
// class class.
func Template(class, ref string) banlieuev1.ImageSource {
	return banlieuev1.ImageSource{ProviderClass: class, Kind: banlieuev1.ImageSourceTemplate, Ref: ref}
}

// BackingFile returns an image source: the existing volume ref on the backends of the
// provider class class.
func BackingFile(class, ref string) banlieuev1.ImageSource {
	return banlieuev1.ImageSource{ProviderClass: class, Kind: banlieuev1.ImageSourceBackingFile, Ref: ref}
}
