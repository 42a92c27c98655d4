// The build without gloo (REFIT_GLOO off, or libgloo-dev missing): joining is refused
// with what to install. The gloo build's definitions are in gloo/torch_process_group_gloo.cpp.
#ifndef REFIT_HAVE_GLOO

#include "core/error.h"
#include "dist/torch_group/torch_process_group.h"

namespace refit {

struct TorchProcessGroup::Impl {
  TorchGroupOptions options;
  std::string reason = "built without gloo";
};

bool built_with_gloo() { return false; }

std::unique_ptr<TorchProcessGroup> TorchProcessGroup::join(const TorchGroupOptions&) {
  fail(
      "this refit was built without gloo, so it cannot join a torch.distributed weight-update "
      "group: "
      "install libgloo-dev (Debian) and rebuild with -DREFIT_GLOO=ON");
}

TorchProcessGroup::TorchProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TorchProcessGroup::~TorchProcessGroup() = default;
void TorchProcessGroup::broadcast(void*, size_t, int) { fail("this refit was built without gloo"); }
const TorchGroupOptions& TorchProcessGroup::options() const { return impl_->options; }
bool TorchProcessGroup::broken() const { return true; }
const std::string& TorchProcessGroup::broken_reason() const { return impl_->reason; }
std::string TorchProcessGroup::describe() const { return "no gloo"; }

}  // namespace refit

#endif
