/**
 * The widget module this extension registers (the sub-call list); the
 * kernel names it in its widgets' `_model_module` and `_model_module_version`
 * (rlm_kernel/widgets/batch_view.py), which must accept this version.
 */
export const MODULE_NAME = 'rlm-kernel';
export const MODULE_VERSION = '0.1.0';
