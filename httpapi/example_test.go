package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-storage/vigil/httpapi"
	"github.com/vigil-storage/vigil/settings"
)

func ExampleAPI() {
	store := settings.NewMemoryStore()
	s, _ := settings.New(store, "", settings.WithRegisterer(prometheus.NewRegistry()))
	defer s.Close()
	api, err := httpapi.New(httpapi.Config{Settings: s, Token: "t0ken"})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	api.Register(mux)
	srv := httptest.NewServer(httpapi.Secure(mux))
	defer srv.Close()

	put := func(token, body string) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v1/settings/node-down-grace-period", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer res.Body.Close()
		var out struct {
			Value string
			Error httpapi.ErrorBody
		}
		_ = json.NewDecoder(res.Body).Decode(&out)
		fmt.Printf("%d value=%q error=%q allowed=%q\n", res.StatusCode, out.Value, out.Error.Code, out.Error.Allowed)
	}
	put("guess", `{"value": "5s"}`)
	put("t0ken", `{"value": "forever"}`)
	put("t0ken", `{"value": "5s"}`)
	fmt.Println(s.NodeDownGracePeriod())
	h, _ := s.History(context.Background(), 1)
	fmt.Printf("%s: %s -> %s by %s (%s)\n", h[0].Setting, h[0].Old, h[0].New, h[0].Actor.Source, h[0].Actor.Identity)
	// Output:
	// 401 value="" error="unauthorized" allowed=""
	// 400 value="" error="invalid-value" allowed="a duration from 0s to 10m (e.g. 500ms, 15s, 2m)"
	// 200 value="5s" error="" allowed=""
	// 5s
	// node-down-grace-period: 2s -> 5s by api (token:b46c0967 from 127.0.0.1)
}
