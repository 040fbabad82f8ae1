package kubelet_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/vigil-storage/vigil/sandbox/kubelet"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// A process of a sandbox node (see sandbox.ProcessSpec) runs the stand-in with
// the node's environment until the node is stopped.
func ExampleRun() {
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("VIGIL_KUBECONFIG"))
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir := os.Getenv("VIGIL_NODE_DIR")
	err = kubelet.Run(ctx, kubelet.Config{
		NodeName:    os.Getenv("VIGIL_NODE"),
		Client:      kubernetes.NewForConfigOrDie(rc),
		CSIEndpoint: "unix://" + filepath.Join(dir, "csi.sock"),
		RootDir:     filepath.Join(dir, "kubelet"),
	})
	if err != nil {
		log.Fatal(err)
	}
}

// The paths and names are the kubelet's (sha256 of the volume handle; of
// handle+driver+node for the VolumeAttachment).
func ExampleTargetPath() {
	root := "/var/lib/kubelet"
	fmt.Println(kubelet.StagingPath(root, "driver.vigil.io", "vol-1", "pv-1", false))
	fmt.Println(kubelet.TargetPath(root, "1f0c", "pv-1", false))
	fmt.Println(kubelet.UniqueVolumeName("driver.vigil.io", "vol-1"))
	fmt.Println(kubelet.AttachmentName("vol-1", "driver.vigil.io", "node-a"))
	// Output:
	// /var/lib/kubelet/plugins/kubernetes.io/csi/driver.vigil.io/d2e8363faaac7ae76def3b14091d8eb5755f6b92e9531627aeec833a8731cc49/globalmount
	// /var/lib/kubelet/pods/1f0c/volumes/kubernetes.io~csi/pv-1/mount
	// kubernetes.io/csi/driver.vigil.io^vol-1
	// csi-b3af1a4ab35def88aa6b06f23862cc2d16e646ace18000447985ef17e3fe9a63
}
