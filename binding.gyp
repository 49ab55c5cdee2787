{
  "targets": [
    {
      # The addon. It never links against ACL: the library is dlopen'ed at run time
      # (native/src/acl_loader.cc), so no CANN headers or libraries are needed to build it.
      "target_name": "npu_fleet",
      "sources": [
        "native/src/acl_errors.cc",
        "native/src/acl_loader.cc",
        "native/src/binding.cc",
        "native/src/device_core.cc",
        "native/src/model_core.cc",
        "native/src/model_exec.cc",
        "native/src/napi_util.cc",
        "native/src/requests.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-pthread", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      "libraries": ["-ldl", "-pthread"]
    },
    {
      # The ACL CPU simulator (native/acl-sim). Every src/*.cc is picked up by the expansion
      # below, so adding a file needs no change here. Output: build/<config>/libacl_sim.so,
      # next to the addon, where acl_loader.cc looks for it.
      "target_name": "acl_sim",
      "type": "shared_library",
      "product_prefix": "lib",
      "product_dir": "<(PRODUCT_DIR)",
      "sources": ["<!@(node -p \"require('fs').readdirSync('native/acl-sim/src').filter(f => f.endsWith('.cc')).sort().map(f => 'native/acl-sim/src/' + f).join(' ')\")"],
      "include_dirs": ["native/acl-sim/include"],
      "cflags!": ["-fno-exceptions", "-fno-rtti"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti", "-std=gnu++17", "-O2", "-O3"],
      "cflags": ["-O3", "-fPIC", "-pthread"],
      "cflags_cc": ["-std=c++17", "-O3", "-fPIC", "-pthread", "-fexceptions"],
      "ldflags": ["-pthread"]
    }
  ]
}
