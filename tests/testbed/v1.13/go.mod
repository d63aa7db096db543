// The dependencies of k8s.io/kubernetes v1.13.12 (its Godeps/Godeps.json) as Go modules, for
// the test bed's legacy control plane: tests/testbed/build --version v1.13.12 copies this file
// and go.sum into the release's source tree. The module proxy refuses bare commit hashes, so each
// pin is the Godeps commit as a pseudo-version where one is known, else the tag Godeps names
// ("tag exact"; "tag base of X" when Godeps is a few commits past that tag), else the pin of a
// later Kubernetes release (noted beside it). Every pin is also a replace (below), as Kubernetes
// does, so that no dependency's go.mod raises it. The deviations a reader should know:
//   - github.com/modern-go/reflect2 v1.0.2: v1.0.1 fails on Go 1.18+.
//   - golang.org/x/net: the HTTP/2 fixes of Kubernetes 1.15.3+; Godeps' b1cc14aba47a is not served.
//   - k8s.io/kube-openapi c59034cc13d5 (the 1.13-era client-go's pin); Godeps' fd52d7a69c20 is
//     not served. openapi-gen at this pin reports exactly api/api-rules/violation_exceptions.list.
//   - github.com/ugorji/go stays at the exact Godeps commit: any other version makes
//     kube-apiserver panic at start ("codecgen version mismatch").
module k8s.io/kubernetes

go 1.12

require (
	bitbucket.org/ww/goautoneg v0.0.0-00010101000000-000000000000 // indirect
	cloud.google.com/go v0.0.0-20160913182117-3b1ae45394a2
	github.com/Azure/azure-sdk-for-go v21.4.0+incompatible // tag exact
	github.com/Azure/go-ansiterm v0.0.0-20170929234023-d6e3b3328b78
	github.com/Azure/go-autorest v11.1.0+incompatible // tag exact
	github.com/JeffAshton/win_pdh v0.0.0-20161109143554-76bb4ee9f0ab
	github.com/MakeNowJust/heredoc v0.0.0-20170808103936-bb23615498cd
	github.com/Microsoft/go-winio v0.4.5 // tag exact
	github.com/Microsoft/hcsshim v0.6.11 // tag exact
	github.com/NYTimes/gziphandler v0.0.0-20170623195520-56545f4a5d46
	github.com/Nvveen/Gotty v0.0.0-20120604004816-cd527374f1e5
	github.com/PuerkitoBio/purell v1.1.0 // tag
	github.com/PuerkitoBio/urlesc v0.0.0-20170810143723-de5bf2ad4578
	github.com/Rican7/retry v0.1.0 // tag base of v0.1.0-9-g272ad122d6e5ce
	github.com/armon/circbuf v0.0.0-20150827004946-bbbad097214e
	github.com/asaskevich/govalidator v0.0.0-20180720115003-f9ffefc3facf
	github.com/aws/aws-sdk-go v1.14.12 // tag exact
	github.com/bazelbuild/bazel-gazelle v0.0.0-20181012220611-c728ce9f663e
	github.com/bazelbuild/buildtools v0.0.0-20180226164855-80c7f0d45d7e // k8s 1.15
	github.com/beorn7/perks v0.0.0-20160229213445-3ac7bf7a47d1
	github.com/blang/semver v3.5.0+incompatible // tag
	github.com/chai2010/gettext-go v0.0.0-20160711120539-c6fed771bfd5
	github.com/client9/misspell v0.0.0-20170928000206-9ce5d979ffda
	github.com/cloudflare/cfssl v0.0.0-20180726162950-56268a613adf
	github.com/clusterhq/flocker-go v0.0.0-20160920122132-2b8b7259d313
	github.com/codedellemc/goscaleio v0.0.0-20170830184815-20e2ce2cf885
	github.com/container-storage-interface/spec v1.0.0 // tag exact
	github.com/containerd/console v0.0.0-20170925154832-84eeaae905fa
	github.com/containerd/containerd v1.0.2 // tag exact
	github.com/containernetworking/cni v0.6.0 // tag exact
	github.com/coreos/bbolt v1.3.1-coreos.6 // tag exact
	github.com/coreos/etcd v3.3.10+incompatible // tag
	github.com/coreos/go-oidc v0.0.0-20180117170138-065b426bd416
	github.com/coreos/go-semver v0.0.0-20180108230905-e214231b295a
	github.com/coreos/go-systemd v0.0.0-20180511133405-39ca1b05acc7
	github.com/coreos/pkg v0.0.0-20180108230652-97fdf19511ea
	github.com/coreos/rkt v1.25.0 // tag exact
	github.com/cpuguy83/go-md2man v1.0.4 // tag exact
	github.com/cyphar/filepath-securejoin v0.0.0-20170720062807-ae69057f2299
	github.com/d2g/dhcp4 v0.0.0-20170904100407-a1d1b6c41b1c
	github.com/d2g/dhcp4client v0.0.0-20170829104524-6e570ed0a266
	github.com/davecgh/go-spew v1.1.1
	github.com/daviddengcn/go-colortext v0.0.0-20160507010035-511bcaf42ccd
	github.com/dgrijalva/jwt-go v0.0.0-20160705203006-01aeca54ebda
	github.com/docker/distribution v0.0.0-20170726174610-edc3ab29cdff
	github.com/docker/docker v0.0.0-20180612054059-a9fbbdc8dd87
	github.com/docker/go-connections v0.3.0 // tag exact
	github.com/docker/go-units v0.3.3
	github.com/docker/libnetwork v0.0.0-20180830151422-a9cd636e3789
	github.com/docker/spdystream v0.0.0-20160310174837-449fdfce4d96
	github.com/elazarl/go-bindata-assetfs v0.0.0-20150624150248-3dcc96556217
	github.com/elazarl/goproxy v0.0.0-20170405201442-c4fc26588b6e
	github.com/emicklei/go-restful v0.0.0-20170410110728-ff4f55a20633
	github.com/emicklei/go-restful-swagger12 v0.0.0-20170208215640-dcef7f557305
	github.com/euank/go-kmsg-parser v2.0.0+incompatible // tag
	github.com/evanphx/json-patch v0.0.0-20190203023257-5858425f7550
	github.com/exponent-io/jsonpath v0.0.0-20151013193312-d6023ce2651d
	github.com/fatih/camelcase v0.0.0-20160318181535-f6a740d52f96
	github.com/fsnotify/fsnotify v1.4.7
	github.com/ghodss/yaml v0.0.0-20180820084758-c7ce16629ff4
	github.com/globalsign/mgo v0.0.0-20181015135952-eeefdecb41b8
	github.com/go-ini/ini v1.25.4 // tag
	github.com/go-openapi/analysis v0.17.2 // tag exact
	github.com/go-openapi/errors v0.17.2 // tag exact
	github.com/go-openapi/jsonpointer v0.19.0 // tag exact
	github.com/go-openapi/jsonreference v0.19.0 // tag exact
	github.com/go-openapi/loads v0.17.2 // tag exact
	github.com/go-openapi/runtime v0.17.2 // tag exact
	github.com/go-openapi/spec v0.17.2 // tag exact
	github.com/go-openapi/strfmt v0.17.0 // tag
	github.com/go-openapi/swag v0.17.2 // tag exact
	github.com/go-openapi/validate v0.18.0 // tag
	github.com/go-ozzo/ozzo-validation v3.5.0+incompatible // tag exact
	github.com/go-sql-driver/mysql v1.3.0 // tag
	github.com/godbus/dbus v0.0.0-20151105175453-c7fdd8b5cd55
	github.com/gogo/protobuf v0.0.0-20171007142547-342cbe0a0415
	github.com/golang/groupcache v0.0.0-20160516000752-02826c3e7903
	github.com/golang/mock v0.0.0-20160127222235-bd3c8e81be01
	github.com/golang/protobuf v1.1.0 // tag
	github.com/google/btree v0.0.0-20160524151835-7d79101e329e
	github.com/google/cadvisor v0.32.0 // tag exact
	github.com/google/certificate-transparency-go v1.0.21 // tag
	github.com/google/gofuzz v0.0.0-20161122191042-44d81051d367
	github.com/google/uuid v0.0.0-20171113160352-8c31c18f31ed
	github.com/googleapis/gnostic v0.0.0-20170729233727-0c5108395e2d
	github.com/gophercloud/gophercloud v0.0.0-20180330165814-781450b3c4fc
	github.com/gorilla/websocket v0.0.0-20170926233335-4201258b820c
	github.com/gregjones/httpcache v0.0.0-20170728041850-787624de3eb7
	github.com/grpc-ecosystem/go-grpc-middleware v1.0.0 // tag base of v1.0.0-4-g498ae206fc3cfe
	github.com/grpc-ecosystem/go-grpc-prometheus v0.0.0-20170330212424-2500245aa611
	github.com/grpc-ecosystem/grpc-gateway v1.3.0 // tag exact
	github.com/hashicorp/golang-lru v0.0.0-20160207214719-a0d98a5f2880
	github.com/hashicorp/hcl v0.0.0-20160711231752-d8c773c4cba1
	github.com/heketi/heketi v0.0.0-20181109135656-558b29266ce0
	github.com/imdario/mergo v0.3.5 // tag
	github.com/inconshreveable/mousetrap v1.0.0 // tag exact
	github.com/jmespath/go-jmespath v0.0.0-20160202185014-0b12d6b521d8
	github.com/jonboulle/clockwork v0.0.0-20141017032234-72f9bd7c4e0c
	github.com/json-iterator/go v0.0.0-20180701071628-ab8a2e0c74be
	github.com/jteeuwen/go-bindata v0.0.0-20151023091102-a0ff2567cfb7
	github.com/kardianos/osext v0.0.0-20150410034420-8fef92e41e22
	github.com/karrick/godirwalk v1.7.5 // tag exact
	github.com/kr/fs v0.0.0-20131111012553-2788f0dbd169
	github.com/kr/pretty v0.0.0-20140812000539-f31442d60e51
	github.com/kr/text v0.0.0-20130911015532-6807e777504f
	github.com/libopenstorage/openstorage v0.0.0-20170906232338-093a0c388875
	github.com/magiconair/properties v0.0.0-20160816085511-61b492c03cf4
	github.com/mailru/easyjson v0.0.0-20180823135443-60711f1a8329
	github.com/marstr/guid v0.0.0-20170427235115-8bdf7d1a087c
	github.com/mattn/go-shellwords v0.0.0-20180605041737-f8471b0a71de
	github.com/mattn/go-sqlite3 v1.6.0 // tag
	github.com/matttproud/golang_protobuf_extensions v1.0.1 // tag
	github.com/mholt/caddy v0.0.0-20180213163048-2de495001514
	github.com/miekg/dns v0.0.0-20160614162101-5d001d020961
	github.com/mindprince/gonvml v0.0.0-20171110221305-fee913ce8fb2
	github.com/mistifyio/go-zfs v0.0.0-20151009155749-1b4ae6fb4e77
	github.com/mitchellh/go-wordwrap v0.0.0-20150314170334-ad45545899c7
	github.com/mitchellh/mapstructure v1.1.2
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd
	github.com/modern-go/reflect2 v1.0.2 // v1.0.1 breaks on Go >= 1.18
	github.com/mohae/deepcopy v0.0.0-20170603005431-491d3605edfb
	github.com/mrunalp/fileutils v0.0.0-20160930181131-4ee1cc9a8058
	github.com/munnerz/goautoneg v0.0.0-20120707110453-a547fc61f48d
	github.com/mvdan/xurls v0.0.0-20160110113200-1b768d7c393a
	github.com/mxk/go-flowrate v0.0.0-20140419014527-cca7078d478f
	github.com/onsi/ginkgo v0.0.0-20170318221715-67b9df7f55fe
	github.com/onsi/gomega v0.0.0-20160911051023-d59fa0ac68bb
	github.com/opencontainers/go-digest v0.0.0-20170106003457-a6d0ee40d420
	github.com/opencontainers/image-spec v0.0.0-20170604055404-372ad780f634
	github.com/opencontainers/runc v0.0.0-20180424185634-871ba2e58e24
	github.com/opencontainers/runtime-spec v1.0.0 // tag exact
	github.com/opencontainers/selinux v0.0.0-20170621221121-4a2974bf1ee9
	github.com/pborman/uuid v1.2.0
	github.com/pelletier/go-toml v1.2.0 // tag
	github.com/peterbourgon/diskv v2.0.1+incompatible // tag
	github.com/pkg/errors v0.8.0 // tag
	github.com/pkg/sftp v0.0.0-20160930220758-4d0e916071f6
	github.com/pmezard/go-difflib v1.0.0
	github.com/pquerna/cachecontrol v0.0.0-20171018203845-0dec1b30a021
	github.com/pquerna/ffjson v0.0.0-20180717144149-af8b230fcd20
	github.com/prometheus/client_golang v0.0.0-20170531130054-e7e903064f5e
	github.com/prometheus/client_model v0.0.0-20150212101744-fa8ad6fec335
	github.com/prometheus/common v0.0.0-20170427095455-13ba4ddd0caa
	github.com/prometheus/procfs v0.0.0-20170519190837-65c1f6f8f0fc
	github.com/quobyte/api v0.1.2 // k8s 1.15
	github.com/rancher/go-rancher v0.0.0-20160922212217-09693a8743ba
	github.com/renstrom/dedent v0.0.0-20150819195903-020d11c3b9c0
	github.com/robfig/cron v0.0.0-20170309132418-df38d32658d8
	github.com/rubiojr/go-vhd v0.0.0-20160810183302-0bfd3b39853c
	github.com/russross/blackfriday v0.0.0-20151117072312-300106c228d5
	github.com/satori/go.uuid v1.2.0 // tag
	github.com/seccomp/libseccomp-golang v0.0.0-20150813023252-1b506fc7c24e
	github.com/shurcooL/sanitized_anchor_name v0.0.0-20151028001915-10ef21a441db
	github.com/sigma/go-inotify v0.0.0-20181102212354-c87b6cf5033d
	github.com/sirupsen/logrus v1.0.4-0.20170822132746-89742aefa4b2
	github.com/soheilhy/cmux v0.1.3 // tag exact
	github.com/spf13/afero v0.0.0-20160816080757-b28a7effac97
	github.com/spf13/cast v0.0.0-20160730092037-e31f36ffc91a
	github.com/spf13/cobra v0.0.0-20180319062004-c439c4fa0937
	github.com/spf13/jwalterweatherman v0.0.0-20160311093646-33c24e77fb80
	github.com/spf13/pflag v1.0.1 // tag
	github.com/spf13/viper v0.0.0-20160820190039-7fb2782df3d8
	github.com/storageos/go-api v0.0.0-20180126153955-3a4032328d99
	github.com/stretchr/objx v0.1.1 // k8s 1.15
	github.com/stretchr/testify v1.2.2
	github.com/syndtr/gocapability v0.0.0-20160928074757-e7cb7fa329f4
	github.com/tmc/grpc-websocket-proxy v0.0.0-20170815181823-89b8d40f7ca8
	github.com/ugorji/go v0.0.0-20171019201919-bdcc60b419d1
	github.com/vishvananda/netlink v0.0.0-20171020171820-b2de5d10e38e
	github.com/vishvananda/netns v0.0.0-20171111001504-be1fbeda1936
	github.com/vmware/govmomi v0.0.0-20180822160426-22f74650cf39
	github.com/vmware/photon-controller-go-sdk v0.0.0-20170310013346-4a435daef6cc
	github.com/xanzy/go-cloudstack v0.0.0-20160728180336-1e2cbf647e57
	github.com/xiang90/probing v0.0.0-20160813154853-07dd2e8dfe18
	go.uber.org/atomic v0.0.0-20181018215023-8dc6146f7569
	go.uber.org/multierr v0.0.0-20180122172545-ddea229ff1df
	go.uber.org/zap v0.0.0-20180814183419-67bc79d13d15
	golang.org/x/crypto v0.0.0-20180808211826-de0752318171
	golang.org/x/lint v0.0.0-20181217174547-8f45f776aaf1
	golang.org/x/net v0.0.0-20190812203447-cdfb69ac37fc // Godeps b1cc14aba47a is not served; the HTTP/2 fixes of Kubernetes 1.15.3+
	golang.org/x/oauth2 v0.0.0-20170412232759-a6bd8cefa181
	golang.org/x/sys v0.0.0-20181004145325-8469e314837c
	golang.org/x/text v0.3.0
	golang.org/x/time v0.0.0-20161028155119-f51c12702a4d
	golang.org/x/tools v0.0.0-20180525024113-a5b4c53f6e8b
	gonum.org/v1/gonum v0.0.0-20180726124543-cebdade430cc
	google.golang.org/api v0.0.0-20180621000839-3639d6d93f37
	google.golang.org/genproto v0.0.0-20170731182057-09f6ed296fc6
	google.golang.org/grpc v1.13.0 // tag exact
	gopkg.in/gcfg.v1 v1.2.0 // tag exact
	gopkg.in/inf.v0 v0.9.0 // tag exact
	gopkg.in/natefinch/lumberjack.v2 v2.0.0-20150622162204-20b71e5b60d7
	gopkg.in/square/go-jose.v2 v2.0.0-20180411045311-89060dee6a84
	gopkg.in/warnings.v0 v0.1.1 // tag exact
	gopkg.in/yaml.v2 v2.2.4 // tag
	k8s.io/api v0.0.0
	k8s.io/apiextensions-apiserver v0.0.0
	k8s.io/apimachinery v0.0.0
	k8s.io/apiserver v0.0.0
	k8s.io/cli-runtime v0.0.0
	k8s.io/client-go v0.0.0
	k8s.io/cloud-provider v0.0.0
	k8s.io/cluster-bootstrap v0.0.0
	k8s.io/code-generator v0.0.0
	k8s.io/csi-api v0.0.0
	k8s.io/gengo v0.0.0-20181106084056-51747d6e00da
	k8s.io/heapster v1.2.0-beta.1 // tag exact
	k8s.io/klog v0.0.0-20181108234604-8139d8cb77af
	k8s.io/kube-aggregator v0.0.0
	k8s.io/kube-controller-manager v0.0.0
	k8s.io/kube-openapi v0.0.0-20181109181836-c59034cc13d5 // Godeps fd52d7a69c20 is not served; the pin of Kubernetes 1.13-era client-go
	k8s.io/kube-proxy v0.0.0
	k8s.io/kube-scheduler v0.0.0
	k8s.io/kubelet v0.0.0
	k8s.io/metrics v0.0.0
	k8s.io/sample-apiserver v0.0.0
	k8s.io/sample-cli-plugin v0.0.0
	k8s.io/sample-controller v0.0.0
	k8s.io/utils v0.0.0-20180726175726-66066c83e385
	sigs.k8s.io/yaml v1.1.0 // tag
	vbom.ml/util v0.0.0-20160121211510-db5cfe13f5cc
)

// Every pin is also a replace, as Kubernetes itself does: the versions above win over
// anything a dependency's own go.mod asks for, so the build uses exactly these.
replace (
	// bitbucket.org no longer serves go-get (kube-openapi imports it): the build copies the same
	// code from github.com/munnerz/goautoneg into ./_goautoneg.
	bitbucket.org/ww/goautoneg => ./_goautoneg
	cloud.google.com/go => cloud.google.com/go v0.0.0-20160913182117-3b1ae45394a2
	github.com/Azure/azure-sdk-for-go => github.com/Azure/azure-sdk-for-go v21.4.0+incompatible
	github.com/Azure/go-ansiterm => github.com/Azure/go-ansiterm v0.0.0-20170929234023-d6e3b3328b78
	github.com/Azure/go-autorest => github.com/Azure/go-autorest v11.1.0+incompatible
	github.com/JeffAshton/win_pdh => github.com/JeffAshton/win_pdh v0.0.0-20161109143554-76bb4ee9f0ab
	github.com/MakeNowJust/heredoc => github.com/MakeNowJust/heredoc v0.0.0-20170808103936-bb23615498cd
	github.com/Microsoft/go-winio => github.com/Microsoft/go-winio v0.4.5
	github.com/Microsoft/hcsshim => github.com/Microsoft/hcsshim v0.6.11
	github.com/NYTimes/gziphandler => github.com/NYTimes/gziphandler v0.0.0-20170623195520-56545f4a5d46
	github.com/Nvveen/Gotty => github.com/Nvveen/Gotty v0.0.0-20120604004816-cd527374f1e5
	github.com/PuerkitoBio/purell => github.com/PuerkitoBio/purell v1.0.0
	github.com/PuerkitoBio/urlesc => github.com/PuerkitoBio/urlesc v0.0.0-20160726150825-5bd2802263f2
	github.com/Rican7/retry => github.com/Rican7/retry v0.1.0
	github.com/armon/circbuf => github.com/armon/circbuf v0.0.0-20150827004946-bbbad097214e
	github.com/asaskevich/govalidator => github.com/asaskevich/govalidator v0.0.0-20180720115003-f9ffefc3facf
	github.com/aws/aws-sdk-go => github.com/aws/aws-sdk-go v1.14.12
	github.com/bazelbuild/bazel-gazelle => github.com/bazelbuild/bazel-gazelle v0.0.0-20181012220611-c728ce9f663e
	github.com/bazelbuild/buildtools => github.com/bazelbuild/buildtools v0.0.0-20180226164855-80c7f0d45d7e
	github.com/beorn7/perks => github.com/beorn7/perks v0.0.0-20160229213445-3ac7bf7a47d1
	github.com/blang/semver => github.com/blang/semver v3.5.0+incompatible
	github.com/chai2010/gettext-go => github.com/chai2010/gettext-go v0.0.0-20160711120539-c6fed771bfd5
	github.com/client9/misspell => github.com/client9/misspell v0.0.0-20170928000206-9ce5d979ffda
	github.com/cloudflare/cfssl => github.com/cloudflare/cfssl v0.0.0-20180726162950-56268a613adf
	github.com/clusterhq/flocker-go => github.com/clusterhq/flocker-go v0.0.0-20160920122132-2b8b7259d313
	github.com/codedellemc/goscaleio => github.com/codedellemc/goscaleio v0.0.0-20170830184815-20e2ce2cf885
	github.com/container-storage-interface/spec => github.com/container-storage-interface/spec v1.0.0
	github.com/containerd/console => github.com/containerd/console v0.0.0-20170925154832-84eeaae905fa
	github.com/containerd/containerd => github.com/containerd/containerd v1.0.2
	github.com/containernetworking/cni => github.com/containernetworking/cni v0.6.0
	github.com/coreos/bbolt => github.com/coreos/bbolt v1.3.1-coreos.6
	github.com/coreos/etcd => github.com/coreos/etcd v3.3.10+incompatible
	github.com/coreos/go-oidc => github.com/coreos/go-oidc v0.0.0-20180117170138-065b426bd416
	github.com/coreos/go-semver => github.com/coreos/go-semver v0.0.0-20180108230905-e214231b295a
	github.com/coreos/go-systemd => github.com/coreos/go-systemd v0.0.0-20180511133405-39ca1b05acc7
	github.com/coreos/pkg => github.com/coreos/pkg v0.0.0-20180108230652-97fdf19511ea
	github.com/coreos/rkt => github.com/coreos/rkt v1.25.0
	github.com/cpuguy83/go-md2man => github.com/cpuguy83/go-md2man v1.0.4
	github.com/cyphar/filepath-securejoin => github.com/cyphar/filepath-securejoin v0.0.0-20170720062807-ae69057f2299
	github.com/d2g/dhcp4 => github.com/d2g/dhcp4 v0.0.0-20170904100407-a1d1b6c41b1c
	github.com/d2g/dhcp4client => github.com/d2g/dhcp4client v0.0.0-20170829104524-6e570ed0a266
	github.com/davecgh/go-spew => github.com/davecgh/go-spew v0.0.0-20170626231645-782f4967f2dc
	github.com/daviddengcn/go-colortext => github.com/daviddengcn/go-colortext v0.0.0-20160507010035-511bcaf42ccd
	github.com/dgrijalva/jwt-go => github.com/dgrijalva/jwt-go v0.0.0-20160705203006-01aeca54ebda
	github.com/docker/distribution => github.com/docker/distribution v0.0.0-20170726174610-edc3ab29cdff
	github.com/docker/docker => github.com/docker/docker v0.0.0-20180612054059-a9fbbdc8dd87
	github.com/docker/go-connections => github.com/docker/go-connections v0.3.0
	github.com/docker/go-units => github.com/docker/go-units v0.0.0-20170127094116-9e638d38cf69
	github.com/docker/libnetwork => github.com/docker/libnetwork v0.0.0-20180830151422-a9cd636e3789
	github.com/docker/spdystream => github.com/docker/spdystream v0.0.0-20160310174837-449fdfce4d96
	github.com/elazarl/go-bindata-assetfs => github.com/elazarl/go-bindata-assetfs v0.0.0-20150624150248-3dcc96556217
	github.com/elazarl/goproxy => github.com/elazarl/goproxy v0.0.0-20170405201442-c4fc26588b6e
	github.com/emicklei/go-restful => github.com/emicklei/go-restful v0.0.0-20170410110728-ff4f55a20633
	github.com/emicklei/go-restful-swagger12 => github.com/emicklei/go-restful-swagger12 v0.0.0-20170208215640-dcef7f557305
	github.com/euank/go-kmsg-parser => github.com/euank/go-kmsg-parser v2.0.0+incompatible
	github.com/evanphx/json-patch => github.com/evanphx/json-patch v0.0.0-20190203023257-5858425f7550
	github.com/exponent-io/jsonpath => github.com/exponent-io/jsonpath v0.0.0-20151013193312-d6023ce2651d
	github.com/fatih/camelcase => github.com/fatih/camelcase v0.0.0-20160318181535-f6a740d52f96
	github.com/fsnotify/fsnotify => github.com/fsnotify/fsnotify v0.0.0-20160816051541-f12c6236fe7b
	github.com/ghodss/yaml => github.com/ghodss/yaml v0.0.0-20180820084758-c7ce16629ff4
	github.com/globalsign/mgo => github.com/globalsign/mgo v0.0.0-20181015135952-eeefdecb41b8
	github.com/go-ini/ini => github.com/go-ini/ini v1.25.4
	github.com/go-openapi/analysis => github.com/go-openapi/analysis v0.17.2
	github.com/go-openapi/errors => github.com/go-openapi/errors v0.17.2
	github.com/go-openapi/jsonpointer => github.com/go-openapi/jsonpointer v0.19.0
	github.com/go-openapi/jsonreference => github.com/go-openapi/jsonreference v0.19.0
	github.com/go-openapi/loads => github.com/go-openapi/loads v0.17.2
	github.com/go-openapi/runtime => github.com/go-openapi/runtime v0.17.2
	github.com/go-openapi/spec => github.com/go-openapi/spec v0.17.2
	github.com/go-openapi/strfmt => github.com/go-openapi/strfmt v0.17.0
	github.com/go-openapi/swag => github.com/go-openapi/swag v0.17.2
	github.com/go-openapi/validate => github.com/go-openapi/validate v0.18.0
	github.com/go-ozzo/ozzo-validation => github.com/go-ozzo/ozzo-validation v3.5.0+incompatible
	github.com/go-sql-driver/mysql => github.com/go-sql-driver/mysql v1.3.0
	github.com/godbus/dbus => github.com/godbus/dbus v0.0.0-20151105175453-c7fdd8b5cd55
	github.com/gogo/protobuf => github.com/gogo/protobuf v0.0.0-20171007142547-342cbe0a0415
	github.com/golang/groupcache => github.com/golang/groupcache v0.0.0-20160516000752-02826c3e7903
	github.com/golang/mock => github.com/golang/mock v0.0.0-20160127222235-bd3c8e81be01
	github.com/golang/protobuf => github.com/golang/protobuf v1.1.0
	github.com/google/btree => github.com/google/btree v0.0.0-20160524151835-7d79101e329e
	github.com/google/cadvisor => github.com/google/cadvisor v0.32.0
	github.com/google/certificate-transparency-go => github.com/google/certificate-transparency-go v1.0.21
	github.com/google/gofuzz => github.com/google/gofuzz v0.0.0-20161122191042-44d81051d367
	github.com/google/uuid => github.com/google/uuid v0.0.0-20171113160352-8c31c18f31ed
	github.com/googleapis/gnostic => github.com/googleapis/gnostic v0.0.0-20170729233727-0c5108395e2d
	github.com/gophercloud/gophercloud => github.com/gophercloud/gophercloud v0.0.0-20180330165814-781450b3c4fc
	github.com/gorilla/websocket => github.com/gorilla/websocket v0.0.0-20170926233335-4201258b820c
	github.com/gregjones/httpcache => github.com/gregjones/httpcache v0.0.0-20170728041850-787624de3eb7
	github.com/grpc-ecosystem/go-grpc-middleware => github.com/grpc-ecosystem/go-grpc-middleware v1.0.0
	github.com/grpc-ecosystem/go-grpc-prometheus => github.com/grpc-ecosystem/go-grpc-prometheus v0.0.0-20170330212424-2500245aa611
	github.com/grpc-ecosystem/grpc-gateway => github.com/grpc-ecosystem/grpc-gateway v1.3.0
	github.com/hashicorp/golang-lru => github.com/hashicorp/golang-lru v0.0.0-20160207214719-a0d98a5f2880
	github.com/hashicorp/hcl => github.com/hashicorp/hcl v0.0.0-20160711231752-d8c773c4cba1
	github.com/heketi/heketi => github.com/heketi/heketi v0.0.0-20181109135656-558b29266ce0
	github.com/imdario/mergo => github.com/imdario/mergo v0.3.5
	github.com/inconshreveable/mousetrap => github.com/inconshreveable/mousetrap v1.0.0
	github.com/jmespath/go-jmespath => github.com/jmespath/go-jmespath v0.0.0-20160202185014-0b12d6b521d8
	github.com/jonboulle/clockwork => github.com/jonboulle/clockwork v0.0.0-20141017032234-72f9bd7c4e0c
	github.com/json-iterator/go => github.com/json-iterator/go v0.0.0-20180701071628-ab8a2e0c74be
	github.com/jteeuwen/go-bindata => github.com/jteeuwen/go-bindata v0.0.0-20151023091102-a0ff2567cfb7
	github.com/kardianos/osext => github.com/kardianos/osext v0.0.0-20150410034420-8fef92e41e22
	github.com/karrick/godirwalk => github.com/karrick/godirwalk v1.7.5
	github.com/kr/fs => github.com/kr/fs v0.0.0-20131111012553-2788f0dbd169
	github.com/kr/pretty => github.com/kr/pretty v0.0.0-20140812000539-f31442d60e51
	github.com/kr/text => github.com/kr/text v0.0.0-20130911015532-6807e777504f
	github.com/libopenstorage/openstorage => github.com/libopenstorage/openstorage v0.0.0-20170906232338-093a0c388875
	github.com/magiconair/properties => github.com/magiconair/properties v0.0.0-20160816085511-61b492c03cf4
	github.com/mailru/easyjson => github.com/mailru/easyjson v0.0.0-20170624190925-2f5df55504eb
	github.com/marstr/guid => github.com/marstr/guid v0.0.0-20170427235115-8bdf7d1a087c
	github.com/mattn/go-shellwords => github.com/mattn/go-shellwords v0.0.0-20180605041737-f8471b0a71de
	github.com/mattn/go-sqlite3 => github.com/mattn/go-sqlite3 v1.6.0
	github.com/matttproud/golang_protobuf_extensions => github.com/matttproud/golang_protobuf_extensions v1.0.1
	github.com/mholt/caddy => github.com/mholt/caddy v0.0.0-20180213163048-2de495001514
	github.com/miekg/dns => github.com/miekg/dns v0.0.0-20160614162101-5d001d020961
	github.com/mindprince/gonvml => github.com/mindprince/gonvml v0.0.0-20171110221305-fee913ce8fb2
	github.com/mistifyio/go-zfs => github.com/mistifyio/go-zfs v0.0.0-20151009155749-1b4ae6fb4e77
	github.com/mitchellh/go-wordwrap => github.com/mitchellh/go-wordwrap v0.0.0-20150314170334-ad45545899c7
	github.com/mitchellh/mapstructure => github.com/mitchellh/mapstructure v0.0.0-20170307201123-53818660ed49
	github.com/modern-go/concurrent => github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd
	github.com/modern-go/reflect2 => github.com/modern-go/reflect2 v1.0.2
	github.com/mohae/deepcopy => github.com/mohae/deepcopy v0.0.0-20170603005431-491d3605edfb
	github.com/mrunalp/fileutils => github.com/mrunalp/fileutils v0.0.0-20160930181131-4ee1cc9a8058
	github.com/munnerz/goautoneg => github.com/munnerz/goautoneg v0.0.0-20120707110453-a547fc61f48d
	github.com/mvdan/xurls => github.com/mvdan/xurls v0.0.0-20160110113200-1b768d7c393a
	github.com/mxk/go-flowrate => github.com/mxk/go-flowrate v0.0.0-20140419014527-cca7078d478f
	github.com/onsi/ginkgo => github.com/onsi/ginkgo v0.0.0-20170318221715-67b9df7f55fe
	github.com/onsi/gomega => github.com/onsi/gomega v0.0.0-20160911051023-d59fa0ac68bb
	github.com/opencontainers/go-digest => github.com/opencontainers/go-digest v0.0.0-20170106003457-a6d0ee40d420
	github.com/opencontainers/image-spec => github.com/opencontainers/image-spec v0.0.0-20170604055404-372ad780f634
	github.com/opencontainers/runc => github.com/opencontainers/runc v0.0.0-20180424185634-871ba2e58e24
	github.com/opencontainers/runtime-spec => github.com/opencontainers/runtime-spec v1.0.0
	github.com/opencontainers/selinux => github.com/opencontainers/selinux v0.0.0-20170621221121-4a2974bf1ee9
	github.com/pborman/uuid => github.com/pborman/uuid v0.0.0-20150603214016-ca53cad383ca
	github.com/pelletier/go-toml => github.com/pelletier/go-toml v1.2.0
	github.com/peterbourgon/diskv => github.com/peterbourgon/diskv v2.0.1+incompatible
	github.com/pkg/errors => github.com/pkg/errors v0.8.0
	github.com/pkg/sftp => github.com/pkg/sftp v0.0.0-20160930220758-4d0e916071f6
	github.com/pmezard/go-difflib => github.com/pmezard/go-difflib v0.0.0-20151028094244-d8ed2627bdf0
	github.com/pquerna/cachecontrol => github.com/pquerna/cachecontrol v0.0.0-20171018203845-0dec1b30a021
	github.com/pquerna/ffjson => github.com/pquerna/ffjson v0.0.0-20180717144149-af8b230fcd20
	github.com/prometheus/client_golang => github.com/prometheus/client_golang v0.0.0-20170531130054-e7e903064f5e
	github.com/prometheus/client_model => github.com/prometheus/client_model v0.0.0-20150212101744-fa8ad6fec335
	github.com/prometheus/common => github.com/prometheus/common v0.0.0-20170427095455-13ba4ddd0caa
	github.com/prometheus/procfs => github.com/prometheus/procfs v0.0.0-20170519190837-65c1f6f8f0fc
	github.com/quobyte/api => github.com/quobyte/api v0.1.2
	github.com/rancher/go-rancher => github.com/rancher/go-rancher v0.0.0-20160922212217-09693a8743ba
	github.com/renstrom/dedent => github.com/renstrom/dedent v0.0.0-20150819195903-020d11c3b9c0
	github.com/robfig/cron => github.com/robfig/cron v0.0.0-20170309132418-df38d32658d8
	github.com/rubiojr/go-vhd => github.com/rubiojr/go-vhd v0.0.0-20160810183302-0bfd3b39853c
	github.com/russross/blackfriday => github.com/russross/blackfriday v0.0.0-20151117072312-300106c228d5
	github.com/satori/go.uuid => github.com/satori/go.uuid v1.2.0
	github.com/seccomp/libseccomp-golang => github.com/seccomp/libseccomp-golang v0.0.0-20150813023252-1b506fc7c24e
	github.com/shurcooL/sanitized_anchor_name => github.com/shurcooL/sanitized_anchor_name v0.0.0-20151028001915-10ef21a441db
	github.com/sigma/go-inotify => github.com/sigma/go-inotify v0.0.0-20181102212354-c87b6cf5033d
	github.com/sirupsen/logrus => github.com/sirupsen/logrus v1.0.4-0.20170822132746-89742aefa4b2
	github.com/soheilhy/cmux => github.com/soheilhy/cmux v0.1.3
	github.com/spf13/afero => github.com/spf13/afero v0.0.0-20160816080757-b28a7effac97
	github.com/spf13/cast => github.com/spf13/cast v0.0.0-20160730092037-e31f36ffc91a
	github.com/spf13/cobra => github.com/spf13/cobra v0.0.0-20180319062004-c439c4fa0937
	github.com/spf13/jwalterweatherman => github.com/spf13/jwalterweatherman v0.0.0-20160311093646-33c24e77fb80
	github.com/spf13/pflag => github.com/spf13/pflag v1.0.1
	github.com/spf13/viper => github.com/spf13/viper v0.0.0-20160820190039-7fb2782df3d8
	github.com/storageos/go-api => github.com/storageos/go-api v0.0.0-20180126153955-3a4032328d99
	github.com/stretchr/objx => github.com/stretchr/objx v0.1.1
	github.com/stretchr/testify => github.com/stretchr/testify v0.0.0-20180319223459-c679ae2cc0cb
	github.com/syndtr/gocapability => github.com/syndtr/gocapability v0.0.0-20160928074757-e7cb7fa329f4
	github.com/tmc/grpc-websocket-proxy => github.com/tmc/grpc-websocket-proxy v0.0.0-20170815181823-89b8d40f7ca8
	github.com/ugorji/go => github.com/ugorji/go v0.0.0-20171019201919-bdcc60b419d1
	github.com/vishvananda/netlink => github.com/vishvananda/netlink v0.0.0-20171020171820-b2de5d10e38e
	github.com/vishvananda/netns => github.com/vishvananda/netns v0.0.0-20171111001504-be1fbeda1936
	github.com/vmware/govmomi => github.com/vmware/govmomi v0.0.0-20180822160426-22f74650cf39
	github.com/vmware/photon-controller-go-sdk => github.com/vmware/photon-controller-go-sdk v0.0.0-20170310013346-4a435daef6cc
	github.com/xanzy/go-cloudstack => github.com/xanzy/go-cloudstack v0.0.0-20160728180336-1e2cbf647e57
	github.com/xiang90/probing => github.com/xiang90/probing v0.0.0-20160813154853-07dd2e8dfe18
	go.uber.org/atomic => go.uber.org/atomic v0.0.0-20181018215023-8dc6146f7569
	go.uber.org/multierr => go.uber.org/multierr v0.0.0-20180122172545-ddea229ff1df
	go.uber.org/zap => go.uber.org/zap v0.0.0-20180814183419-67bc79d13d15
	golang.org/x/crypto => golang.org/x/crypto v0.0.0-20180808211826-de0752318171
	golang.org/x/lint => golang.org/x/lint v0.0.0-20181217174547-8f45f776aaf1
	golang.org/x/net => golang.org/x/net v0.0.0-20190812203447-cdfb69ac37fc
	golang.org/x/oauth2 => golang.org/x/oauth2 v0.0.0-20170412232759-a6bd8cefa181
	golang.org/x/sys => golang.org/x/sys v0.0.0-20171031081856-95c657629925
	golang.org/x/text => golang.org/x/text v0.0.0-20170810154203-b19bf474d317
	golang.org/x/time => golang.org/x/time v0.0.0-20161028155119-f51c12702a4d
	golang.org/x/tools => golang.org/x/tools v0.0.0-20170428054726-2382e3994d48
	gonum.org/v1/gonum => gonum.org/v1/gonum v0.0.0-20180726124543-cebdade430cc
	google.golang.org/api => google.golang.org/api v0.0.0-20180621000839-3639d6d93f37
	google.golang.org/genproto => google.golang.org/genproto v0.0.0-20170731182057-09f6ed296fc6
	google.golang.org/grpc => google.golang.org/grpc v1.13.0
	gopkg.in/gcfg.v1 => gopkg.in/gcfg.v1 v1.2.0
	gopkg.in/inf.v0 => gopkg.in/inf.v0 v0.9.0
	gopkg.in/natefinch/lumberjack.v2 => gopkg.in/natefinch/lumberjack.v2 v2.0.0-20150622162204-20b71e5b60d7
	gopkg.in/square/go-jose.v2 => gopkg.in/square/go-jose.v2 v2.0.0-20180411045311-89060dee6a84
	gopkg.in/warnings.v0 => gopkg.in/warnings.v0 v0.1.1
	gopkg.in/yaml.v2 => gopkg.in/yaml.v2 v2.2.4
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/apiextensions-apiserver => ./staging/src/k8s.io/apiextensions-apiserver
	k8s.io/apimachinery => ./staging/src/k8s.io/apimachinery
	k8s.io/apiserver => ./staging/src/k8s.io/apiserver
	k8s.io/cli-runtime => ./staging/src/k8s.io/cli-runtime
	k8s.io/client-go => ./staging/src/k8s.io/client-go
	k8s.io/cloud-provider => ./staging/src/k8s.io/cloud-provider
	k8s.io/cluster-bootstrap => ./staging/src/k8s.io/cluster-bootstrap
	k8s.io/code-generator => ./staging/src/k8s.io/code-generator
	k8s.io/csi-api => ./staging/src/k8s.io/csi-api
	k8s.io/gengo => k8s.io/gengo v0.0.0-20181106084056-51747d6e00da
	k8s.io/heapster => k8s.io/heapster v1.2.0-beta.1
	k8s.io/klog => k8s.io/klog v0.0.0-20181108234604-8139d8cb77af
	k8s.io/kube-aggregator => ./staging/src/k8s.io/kube-aggregator
	k8s.io/kube-controller-manager => ./staging/src/k8s.io/kube-controller-manager
	k8s.io/kube-openapi => k8s.io/kube-openapi v0.0.0-20181109181836-c59034cc13d5
	k8s.io/kube-proxy => ./staging/src/k8s.io/kube-proxy
	k8s.io/kube-scheduler => ./staging/src/k8s.io/kube-scheduler
	k8s.io/kubelet => ./staging/src/k8s.io/kubelet
	k8s.io/metrics => ./staging/src/k8s.io/metrics
	k8s.io/sample-apiserver => ./staging/src/k8s.io/sample-apiserver
	k8s.io/sample-cli-plugin => ./staging/src/k8s.io/sample-cli-plugin
	k8s.io/sample-controller => ./staging/src/k8s.io/sample-controller
	k8s.io/utils => k8s.io/utils v0.0.0-20180726175726-66066c83e385
	sigs.k8s.io/yaml => sigs.k8s.io/yaml v1.1.0
	// vbom.ml no longer serves go-get; the same repository under its author's GitHub name.
	vbom.ml/util => github.com/fvbommel/util v0.0.0-20160121211510-db5cfe13f5cc
)
