// Package csi serves Vigil's CSI identity and controller services (and, when one
// is passed in, a node service) on a unix socket for the kubelet and the upstream
// external-provisioner and external-attacher sidecars. It translates CSI requests
// into calls on the datapath volume server through the small Volumes interface it
// declares: CreateVolume and DeleteVolume are idempotent by name and by id,
// ControllerPublishVolume is a Grant whose epoch travels to the node in the publish
// context under vigil.PublishContextEpochKey, and ControllerUnpublishVolume fences
// the node and then releases its grant, so a node that is detached can never write
// again with its old epoch. Every request is checked before anything changes, and
// datapath errors reach the caller as gRPC codes through one mapping function,
// statusFromError. The package owns neither the data nor the node side: volumes,
// grants and fences live in the datapath, and staging and publishing on a node
// belong to the engine-node.
package csi
