package kubetest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BindClaims stands in for kube-controller-manager's volume controllers
// and a storage provisioner (none runs here) until t ends: it binds every
// claim of the namespace to a PersistentVolume of its own, as a
// provisioner and the PV binder would, and lets deleted claims go (the
// pvc-protection controller's job). An agentbox node keeps a claim's data
// in a directory of its own named after the claim, so the volume's source
// is never mounted.
func (c *Cluster) BindClaims(t testing.TB) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			claims, err := c.Clientset.CoreV1().PersistentVolumeClaims(c.Namespace).List(ctx, metav1.ListOptions{})
			if err == nil {
				for i := range claims.Items {
					if err := c.bindClaim(ctx, &claims.Items[i]); err != nil && ctx.Err() == nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
						t.Logf("bind claim %s: %v", claims.Items[i].Name, err)
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
}

func (c *Cluster) bindClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	claims := c.Clientset.CoreV1().PersistentVolumeClaims(pvc.Namespace)
	if pvc.DeletionTimestamp != nil {
		if len(pvc.Finalizers) > 0 {
			pvc.Finalizers = nil
			_, err := claims.Update(ctx, pvc, metav1.UpdateOptions{})
			return err
		}
		return nil
	}
	if pvc.Spec.VolumeName != "" {
		return nil
	}
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + string(pvc.UID)},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/nonexistent/agentbox-test/" + string(pvc.UID)}},
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
		},
	}
	pvs := c.Clientset.CoreV1().PersistentVolumes()
	created, err := pvs.Create(ctx, pv, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = pvs.Get(ctx, pv.Name, metav1.GetOptions{})
	}
	if err != nil {
		return err
	}
	created.Status.Phase = corev1.VolumeBound
	if _, err := pvs.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		return err
	}
	if pvc.Annotations == nil {
		pvc.Annotations = map[string]string{}
	}
	pvc.Annotations["pv.kubernetes.io/bind-completed"] = "yes"
	pvc.Spec.VolumeName = pv.Name
	updated, err := claims.Update(ctx, pvc, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	updated.Status.Phase = corev1.ClaimBound
	updated.Status.AccessModes = updated.Spec.AccessModes
	updated.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: size}
	_, err = claims.UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	return err
}
