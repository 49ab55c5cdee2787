/**
 * src/device: the only module that loads the native addon. Typed, validated access to one ACL
 * backend (a real Ascend NPU or the bundled CPU simulator). Importing it does no work.
 */
export { backendInfo, Device, LoadedModel, openDevice } from './device.ts';
export type { BackendInfo, ExecuteInput, ExecuteOptions, ExecuteResult, LoadModelOptions, TensorSpec } from './device.ts';
export { ACL_DTYPES, dtypeFromAcl, elementBytes } from './acl-dtype.ts';
export { addonCandidates } from './native-addon.ts';
