package v1alpha1

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Scheme knows this group version (and the meta types its requests use).
var Scheme = runtime.NewScheme()

// Codecs serialize this group version.
var Codecs = serializer.NewCodecFactory(Scheme)

var parameterCodec = runtime.NewParameterCodec(Scheme)

func init() {
	if err := AddToScheme(Scheme); err != nil {
		panic(err)
	}
}

// Client is a typed client for NodeRecovery objects (cluster-scoped), the way
// client-go's generated clients are built, without the generator.
type Client struct {
	rc rest.Interface
}

// NewForConfig returns a client for cfg's cluster.
func NewForConfig(cfg *rest.Config) (*Client, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &SchemeGroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = Codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("noderecoveries client: %w", err)
	}
	return &Client{rc: rc}, nil
}

// NewWithRESTClient wraps an existing REST client (tests).
func NewWithRESTClient(rc rest.Interface) *Client { return &Client{rc: rc} }

// Get returns one NodeRecovery.
func (c *Client) Get(ctx context.Context, name string, opts metav1.GetOptions) (*NodeRecovery, error) {
	out := &NodeRecovery{}
	err := c.rc.Get().Resource(Resource).Name(name).VersionedParams(&opts, parameterCodec).Do(ctx).Into(out)
	return out, err
}

// List lists NodeRecovery objects.
func (c *Client) List(ctx context.Context, opts metav1.ListOptions) (*NodeRecoveryList, error) {
	out := &NodeRecoveryList{}
	err := c.rc.Get().Resource(Resource).VersionedParams(&opts, parameterCodec).Do(ctx).Into(out)
	return out, err
}

// Watch watches NodeRecovery objects.
func (c *Client) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	var timeout time.Duration
	if opts.TimeoutSeconds != nil {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	return c.rc.Get().Resource(Resource).VersionedParams(&opts, parameterCodec).Timeout(timeout).Watch(ctx)
}

// Create creates a NodeRecovery (its status is ignored by the API server; set it
// with UpdateStatus).
func (c *Client) Create(ctx context.Context, r *NodeRecovery, opts metav1.CreateOptions) (*NodeRecovery, error) {
	out := &NodeRecovery{}
	err := c.rc.Post().Resource(Resource).VersionedParams(&opts, parameterCodec).Body(r).Do(ctx).Into(out)
	return out, err
}

// UpdateStatus writes r's status (optimistic concurrency on resourceVersion).
func (c *Client) UpdateStatus(ctx context.Context, r *NodeRecovery, opts metav1.UpdateOptions) (*NodeRecovery, error) {
	out := &NodeRecovery{}
	err := c.rc.Put().Resource(Resource).Name(r.Name).SubResource("status").VersionedParams(&opts, parameterCodec).Body(r).Do(ctx).Into(out)
	return out, err
}

// Patch patches a NodeRecovery (or its status, with subresource "status").
func (c *Client) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*NodeRecovery, error) {
	out := &NodeRecovery{}
	err := c.rc.Patch(pt).Resource(Resource).Name(name).SubResource(subresources...).VersionedParams(&opts, parameterCodec).Body(data).Do(ctx).Into(out)
	return out, err
}

// Delete deletes a NodeRecovery.
func (c *Client) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return c.rc.Delete().Resource(Resource).Name(name).Body(&opts).Do(ctx).Error()
}

// NewInformer returns a shared informer over every NodeRecovery.
func NewInformer(c *Client, resync time.Duration) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return c.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, o)
		},
	}
	return cache.NewSharedIndexInformer(lw, &NodeRecovery{}, resync, cache.Indexers{})
}
