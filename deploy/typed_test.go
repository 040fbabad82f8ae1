package deploy_test

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// typedFor returns a new typed object for kind, nil for kinds without Go types
// here (the CRD, checked against the embedded file instead).
func typedFor(kind string) any {
	switch kind {
	case "Namespace":
		return &corev1.Namespace{}
	case "ServiceAccount":
		return &corev1.ServiceAccount{}
	case "ConfigMap":
		return &corev1.ConfigMap{}
	case "Service":
		return &corev1.Service{}
	case "Deployment":
		return &appsv1.Deployment{}
	case "StatefulSet":
		return &appsv1.StatefulSet{}
	case "DaemonSet":
		return &appsv1.DaemonSet{}
	case "ClusterRole":
		return &rbacv1.ClusterRole{}
	case "ClusterRoleBinding":
		return &rbacv1.ClusterRoleBinding{}
	case "Role":
		return &rbacv1.Role{}
	case "RoleBinding":
		return &rbacv1.RoleBinding{}
	case "PriorityClass":
		return &schedulingv1.PriorityClass{}
	case "PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "CSIDriver":
		return &storagev1.CSIDriver{}
	case "StorageClass":
		return &storagev1.StorageClass{}
	case "ValidatingAdmissionPolicy":
		return &admissionregistrationv1.ValidatingAdmissionPolicy{}
	case "ValidatingAdmissionPolicyBinding":
		return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	}
	return nil
}
