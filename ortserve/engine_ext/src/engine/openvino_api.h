// The OpenVINO C functions the engine calls (openvino_runtime.cc resolves them with dlsym), for openvino_runtime.cc
// and openvino_model.cc only.
#pragma once

#include <string>

#include <openvino/c/ov_compiled_model.h>
#include <openvino/c/ov_core.h>
#include <openvino/c/ov_infer_request.h>
#include <openvino/c/ov_model.h>
#include <openvino/c/ov_node.h>
#include <openvino/c/ov_shape.h>
#include <openvino/c/ov_tensor.h>
#include "openvino_runtime.h"

namespace ortserve {

// The C functions the engine calls, resolved from libopenvino_c with dlsym.
struct OpenVinoApi {
  decltype(&ov_core_create) core_create;
  decltype(&ov_core_read_model) core_read_model;
  decltype(&ov_core_compile_model) core_compile_model;
  decltype(&ov_core_get_property) core_get_property;
  decltype(&ov_get_openvino_version) get_openvino_version;
  decltype(&ov_version_free) version_free;
  decltype(&ov_model_free) model_free;
  decltype(&ov_model_inputs_size) model_inputs_size;
  decltype(&ov_model_outputs_size) model_outputs_size;
  decltype(&ov_model_const_input_by_index) model_const_input_by_index;
  decltype(&ov_model_const_output_by_index) model_const_output_by_index;
  decltype(&ov_compiled_model_get_property) compiled_model_get_property;
  decltype(&ov_compiled_model_create_infer_request) compiled_model_create_infer_request;
  decltype(&ov_compiled_model_free) compiled_model_free;
  decltype(&ov_port_get_any_name) port_get_any_name;
  decltype(&ov_output_const_port_free) output_const_port_free;
  decltype(&ov_infer_request_set_input_tensor_by_index) infer_request_set_input_tensor_by_index;
  decltype(&ov_infer_request_infer) infer_request_infer;
  decltype(&ov_infer_request_get_output_tensor_by_index) infer_request_get_output_tensor_by_index;
  decltype(&ov_infer_request_free) infer_request_free;
  decltype(&ov_tensor_create_from_host_ptr) tensor_create_from_host_ptr;
  decltype(&ov_tensor_get_shape) tensor_get_shape;
  decltype(&ov_tensor_get_element_type) tensor_get_element_type;
  decltype(&ov_tensor_data) tensor_data;
  decltype(&ov_tensor_free) tensor_free;
  decltype(&ov_shape_create) shape_create;
  decltype(&ov_shape_free) shape_free;
  decltype(&ov_get_last_err_msg) get_last_err_msg;
  decltype(&ov_free) free;
};

// The API, dlopen()ed on first use (RTLD_LOCAL | RTLD_NOW). Throws ModelLoadError saying what to install when the
// library is missing or lacks a function.
const OpenVinoApi& OpenVino();

// The process's one ov_core (OpenVINO's Core is thread-safe), created on first use and never freed, like ORT's Env.
ov_core_t* OpenVinoCore();

// Throws ModelLoadError(`doing` + OpenVINO's message) unless `status` is OK.
void CheckOpenVino(ov_status_e status, const std::string& doing);

}  // namespace ortserve
